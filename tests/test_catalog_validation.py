"""A malformed catalog file is refused with the entry and the field named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from cost_models.catalog import CatalogError, load_catalog

_SRC = "test datasheet"
GOOD: dict[str, Any] = {
    "name": "TEST-GPU",
    "vendor": "nvidia",
    "generation": "ampere",
    "memory_gib": 40,
    "hbm_gb_per_s": 1555,
    "peak_tflops": {"fp32": 19.5, "fp16": 312, "bf16": 312},
    "intra_node_link": "nvlink",
    "intra_node_gb_per_s": 300,
    "nvlink_gb_per_s": 300,
    "pcie_gb_per_s": 32,
    "tdp_w": 400,
    "aliases": ["tg"],
    "sources": {
        k: _SRC
        for k in ("memory_gib", "hbm_gb_per_s", "peak_tflops", "intra_node_gb_per_s",
                  "nvlink_gb_per_s", "pcie_gb_per_s", "tdp_w")
    },
}


def _write(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"schema": "hetplan.gpus/v1", "gpus": entries}))
    return path


def test_minimal_entry_loads(tmp_path: Path) -> None:
    (spec,) = load_catalog(_write(tmp_path, [GOOD]))
    assert spec.name == "TEST-GPU" and spec.peak("bf16") == 312.0


def _broken(mutate) -> dict[str, Any]:
    entry = copy.deepcopy(GOOD)
    mutate(entry)
    return entry


CASES = [
    ("negative memory", lambda e: e.update(memory_gib=-40), "memory_gib", "positive"),
    ("zero tdp", lambda e: e.update(tdp_w=0), "tdp_w", "positive"),
    ("string number", lambda e: e.update(hbm_gb_per_s="1555"), "hbm_gb_per_s", "positive"),
    ("missing number", lambda e: e.pop("pcie_gb_per_s"), "pcie_gb_per_s", "required"),
    ("unknown dtype", lambda e: e["peak_tflops"].update(int8=624), "peak_tflops.int8", "dtype"),
    ("bad peak", lambda e: e["peak_tflops"].update(fp16=-1), "peak_tflops.fp16", "positive"),
    ("no fp16", lambda e: e["peak_tflops"].pop("fp16"), "peak_tflops.fp16", "required"),
    ("missing source", lambda e: e["sources"].pop("tdp_w"), "sources.tdp_w", "source"),
    ("missing peak source", lambda e: e["sources"].pop("peak_tflops"),
     "sources.peak_tflops.fp32", "source"),
    ("empty source", lambda e: e["sources"].update(tdp_w=" "), "sources.tdp_w", "citation"),
    ("source for nothing", lambda e: e["sources"].update(speed="x"), "sources.speed", "field"),
    ("price without source", lambda e: e.update(price_per_gpu_hour=2.0),
     "sources.price_per_gpu_hour", "source"),
    ("bf16 on volta", lambda e: e.update(generation="volta"), "peak_tflops.bf16", "volta"),
    ("unknown field", lambda e: e.update(colour="green"), "colour", "unknown field"),
    ("bad vendor", lambda e: e.update(vendor="intel"), "vendor", "nvidia"),
    ("bad link", lambda e: e.update(intra_node_link="ib"), "intra_node_link", "nvlink"),
    ("nvlink mismatch", lambda e: e.update(intra_node_gb_per_s=150), "intra_node_gb_per_s",
     "nvlink_gb_per_s"),
    ("alias not a string", lambda e: e.update(aliases=[3090]), "aliases", "strings"),
]


@pytest.mark.parametrize("label,mutate,field,words", CASES, ids=[c[0] for c in CASES])
def test_malformed_entry_names_entry_and_field(
    tmp_path: Path, label: str, mutate, field: str, words: str
) -> None:
    path = _write(tmp_path, [GOOD, _broken(mutate)])
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    message = str(info.value)
    assert "gpus[1] (TEST-GPU)" in message, message
    assert f": {field}:" in message, message
    assert words in message, message
    assert "\n" not in message


def test_alias_shared_by_two_entries_is_refused(tmp_path: Path) -> None:
    other = _broken(lambda e: e.update(name="OTHER-GPU", aliases=["T G"]))
    with pytest.raises(CatalogError, match="'T G' is also TEST-GPU's"):
        load_catalog(_write(tmp_path, [GOOD, other]))


@pytest.mark.parametrize(
    "text,words",
    [
        ("gpus: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "non-empty `gpus:` list"),
        ("schema: hetplan.gpus/v1\ngpus: []\n", "non-empty `gpus:` list"),
        ("schema: other/v9\ngpus:\n  - {name: x}\n", "schema"),
    ],
)
def test_malformed_file(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=words):
        load_catalog(path)
