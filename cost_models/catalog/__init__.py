"""The GPU catalog: `gpus.yaml` beside this file, validated when loaded.

    from cost_models.catalog import get_gpu, all_gpus
    get_gpu("a100-80g").peak("bf16")      # 312.0 (dense TFLOP/s)

Names resolve ignoring case, spaces, dashes and punctuation, so `A100 80GB`, `a100-80g` and
Sailor's `A100-80` all find `A100-SXM4-80GB`.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from cost_models.gpu import DTYPES, GpuSpec
from cost_models.mig import mig_gpu, split_mig_name

__all__ = [
    "CATALOG_PATH",
    "CatalogError",
    "all_gpus",
    "get_gpu",
    "gpu_for_device",
    "load_catalog",
    "normalize_gpu_name",
]

CATALOG_PATH = Path(__file__).with_name("gpus.yaml")

_REQUIRED_NUMBERS = ("memory_gib", "hbm_gb_per_s", "intra_node_gb_per_s", "pcie_gb_per_s", "tdp_w")
_OPTIONAL_NUMBERS = ("nvlink_gb_per_s", "price_per_gpu_hour", "sm_count")
_STRINGS = ("name", "vendor", "generation", "intra_node_link")
_OTHER_KEYS = ("peak_tflops", "aliases", "sources", "notes")
_KEYS = frozenset((*_REQUIRED_NUMBERS, *_OPTIONAL_NUMBERS, *_STRINGS, *_OTHER_KEYS))
_VENDORS = ("nvidia", "amd")
_LINKS = ("nvlink", "pcie")
# Volta and Turing tensor cores take FP16 only: no BF16, no TF32
# (Turing whitepaper WP-09183-001, Tesla V100 datasheet).
_FP16_ONLY_GENERATIONS = ("volta", "turing")


class CatalogError(ValueError):
    """The catalog file itself is malformed (a bug in the bundled data, or in a user's copy)."""


def normalize_gpu_name(name: str) -> str:
    """The lookup key: lowercase letters and digits only (`A100 80GB` -> `a10080gb`)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _positive(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _entry(raw: Any, index: int, where: str) -> GpuSpec:
    label = f"{where}: gpus[{index}]"
    if not isinstance(raw, dict):
        raise CatalogError(f"{label}: must be a mapping of fields, got {type(raw).__name__}")
    name = raw.get("name")
    if isinstance(name, str) and name:
        label = f"{label} ({name})"

    def fail(field: str, message: str) -> CatalogError:
        return CatalogError(f"{label}: {field}: {message}")

    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown field; known fields: {', '.join(sorted(_KEYS))}")
    for key in _STRINGS:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise fail(key, "required, a non-empty string")
    if raw["vendor"] not in _VENDORS:
        raise fail("vendor", f"must be one of {', '.join(_VENDORS)}, got {raw['vendor']!r}")
    if raw["intra_node_link"] not in _LINKS:
        raise fail("intra_node_link", f"must be one of {', '.join(_LINKS)}")
    for key in _REQUIRED_NUMBERS:
        if key not in raw:
            raise fail(key, "required")
    for key in (*_REQUIRED_NUMBERS, *_OPTIONAL_NUMBERS):
        if key in raw and not _positive(raw[key]):
            raise fail(key, f"must be a positive number, got {raw[key]!r}")
    if "sm_count" in raw and not isinstance(raw["sm_count"], int):
        raise fail("sm_count", f"must be a whole number of SMs, got {raw['sm_count']!r}")

    peaks = raw.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise fail("peak_tflops", "required, a mapping dtype -> dense TFLOP/s")
    for dtype, value in peaks.items():
        if dtype not in DTYPES:
            raise fail(f"peak_tflops.{dtype}", f"unknown dtype; known: {', '.join(DTYPES)}")
        if not _positive(value):
            raise fail(f"peak_tflops.{dtype}", f"must be a positive number, got {value!r}")
    for dtype in ("fp32", "fp16"):
        if dtype not in peaks:
            raise fail(f"peak_tflops.{dtype}", "required (every catalog GPU has it)")
    if raw["generation"] in _FP16_ONLY_GENERATIONS:
        for dtype in ("bf16", "tf32"):
            if dtype in peaks:
                raise fail(f"peak_tflops.{dtype}", f"{raw['generation']} GPUs have no {dtype}")

    link = raw["intra_node_link"]
    if link == "nvlink" and raw.get("nvlink_gb_per_s") != raw["intra_node_gb_per_s"]:
        raise fail("intra_node_gb_per_s", "with intra_node_link nvlink, must equal nvlink_gb_per_s")
    if link == "pcie" and raw["intra_node_gb_per_s"] != raw["pcie_gb_per_s"]:
        raise fail("intra_node_gb_per_s", "with intra_node_link pcie it must equal pcie_gb_per_s")

    sources = raw.get("sources")
    if not isinstance(sources, dict):
        raise fail("sources", "required, a mapping field -> citation")
    for key, text in sources.items():
        field = str(key).split(".", 1)[0]
        if field not in _KEYS or field in ("name", "aliases", "sources", "notes"):
            raise fail(f"sources.{key}", "names no numeric field of this entry")
        if not isinstance(text, str) or not text.strip():
            raise fail(f"sources.{key}", "must be a non-empty citation string")
    numeric = [k for k in (*_REQUIRED_NUMBERS, *_OPTIONAL_NUMBERS) if k in raw]
    for key in numeric:
        if key not in sources:
            raise fail(f"sources.{key}", "missing: every number needs its source")
    for dtype in (d for d in DTYPES if d in peaks):
        if "peak_tflops" not in sources and f"peak_tflops.{dtype}" not in sources:
            raise fail(f"sources.peak_tflops.{dtype}", "missing: every number needs its source")

    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise fail("aliases", "must be a list of non-empty strings")
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise fail("notes", "must be a string")

    return GpuSpec(
        name=raw["name"],
        vendor=raw["vendor"],
        generation=raw["generation"],
        memory_gib=float(raw["memory_gib"]),
        hbm_gb_per_s=float(raw["hbm_gb_per_s"]),
        peak_tflops={d: float(peaks[d]) for d in DTYPES if d in peaks},
        intra_node_gb_per_s=float(raw["intra_node_gb_per_s"]),
        intra_node_link=link,
        pcie_gb_per_s=float(raw["pcie_gb_per_s"]),
        nvlink_gb_per_s=float(raw["nvlink_gb_per_s"]) if "nvlink_gb_per_s" in raw else None,
        tdp_w=float(raw["tdp_w"]),
        sm_count=int(raw["sm_count"]) if "sm_count" in raw else None,
        notes=" ".join(notes.split()),
        aliases=tuple(aliases),
        sources={str(k): str(v) for k, v in sources.items()},
        price_per_gpu_hour=(
            float(raw["price_per_gpu_hour"]) if "price_per_gpu_hour" in raw else None
        ),
    )


def load_catalog(path: str | Path = CATALOG_PATH) -> tuple[GpuSpec, ...]:
    """Read and validate a catalog file; CatalogError names the entry and field on any fault."""
    path = Path(path)
    where = path.name
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list) or not data["gpus"]:
        raise CatalogError(f"{where}: must be a mapping with a non-empty `gpus:` list")
    if data.get("schema") != "hetplan.gpus/v1":
        raise CatalogError(f"{where}: schema: must be 'hetplan.gpus/v1'")
    specs = tuple(_entry(raw, i, where) for i, raw in enumerate(data["gpus"]))
    owner: dict[str, str] = {}
    for spec in specs:
        for alias in (spec.name, *spec.aliases):
            key = normalize_gpu_name(alias)
            if not key:
                raise CatalogError(f"{where}: {spec.name}: alias {alias!r} has no letter or digit")
            if owner.get(key, spec.name) != spec.name:
                raise CatalogError(
                    f"{where}: {spec.name}: name or alias {alias!r} is also {owner[key]}'s"
                )
            owner[key] = spec.name
    return specs


@lru_cache(maxsize=1)
def _bundled() -> tuple[tuple[GpuSpec, ...], dict[str, GpuSpec]]:
    specs = load_catalog(CATALOG_PATH)
    index = {
        normalize_gpu_name(alias): spec for spec in specs for alias in (spec.name, *spec.aliases)
    }
    return specs, index


def all_gpus() -> tuple[GpuSpec, ...]:
    """Every catalog entry, in catalog (file) order."""
    return _bundled()[0]


def get_gpu(name: str) -> GpuSpec:
    """The catalog entry for `name` or one of its aliases; LookupError with a suggestion if none."""
    specs, index = _bundled()
    sliced = split_mig_name(str(name))
    if sliced is not None:  # `A100-SXM4-80GB:1g.10gb`: one MIG slice (cost_models/mig.py)
        return mig_gpu(get_gpu(sliced[0]), sliced[1])
    key = normalize_gpu_name(str(name))
    if key in index:
        return index[key]
    close = difflib.get_close_matches(key, list(index), n=1, cutoff=0.6)
    hint = f"; did you mean {index[close[0]].name}?" if close else ""
    raise LookupError(f"unknown GPU type {name!r}{hint} (`hetplan gpus` lists the catalog)")


_VENDOR_WORDS = re.compile(r"^(nvidia|tesla|geforce|amd|instinct|quadro)\s+", re.IGNORECASE)
_FAMILY = re.compile(r"\b((?:rtx[\s-]?)?[a-z]*\d{2,4}(?:\s?ti)?[a-z]?)\b", re.IGNORECASE)


def gpu_for_device(device_name: str, memory_gib: float | None = None) -> GpuSpec:
    """The catalog entry for a name as the driver reports it (`torch.cuda.get_device_name`:
    "NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe", "Tesla V100-SXM2-16GB"): vendor words
    dropped, then the entries of that family narrowed by form factor (PCIe, NVL) and by the
    device's memory. LookupError when nothing or more than one entry fits."""
    name = device_name.strip()
    while _VENDOR_WORDS.match(name):
        name = _VENDOR_WORDS.sub("", name, count=1)
    with contextlib.suppress(LookupError):
        return get_gpu(name)
    family = _FAMILY.search(name)
    if family is None:
        raise LookupError(f"GPU {device_name!r}: no model number in the name")
    key = normalize_gpu_name(family.group(1))
    lower = name.lower()
    found = [g for g in all_gpus() if normalize_gpu_name(g.name).startswith(key)
             or any(normalize_gpu_name(a) == key for a in g.aliases)]
    for word in ("pcie", "nvl"):
        narrowed = [g for g in found if (word in g.name.lower()) == (word in lower)]
        found = narrowed or found
    if memory_gib is not None and len(found) > 1:
        best = min(abs(g.memory_gib - memory_gib) for g in found)
        found = [g for g in found if abs(g.memory_gib - memory_gib) == best]
    if len(found) != 1:
        which = ", ".join(g.name for g in found) or "none"
        raise LookupError(f"GPU {device_name!r}: the catalog entry is ambiguous or missing "
                          f"(candidates: {which}); name it with --gpu (`hetplan gpus`)")
    return found[0]
