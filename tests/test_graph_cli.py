"""`hetplan inspect` and `hetplan models`: JSON documents and tables."""

from __future__ import annotations

import json
import sys

import pytest

from planner.cli.main import main


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["hetplan", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


def test_inspect_json_has_totals_and_every_layer(monkeypatch, capsys) -> None:
    doc = json.loads(_run(monkeypatch, capsys, "inspect", "llama3-70b", "--json"))
    assert doc["params"] == 70_553_706_496
    assert len(doc["layers"]) == 82 and doc["layers"][1]["name"] == "layers.0"
    assert doc["fwd_flops"] == sum(layer["fwd_flops"] for layer in doc["layers"])
    assert doc["precision"] == "bf16" and doc["spec"]["num_kv_heads"] == 8
    for key in ("params", "fwd_flops", "bwd_flops", "activation_bytes", "output_bytes"):
        assert key in doc["layers"][1]


def test_inspect_table_collapses_identical_blocks(monkeypatch, capsys) -> None:
    out = _run(monkeypatch, capsys, "inspect", "gpt3-175b")
    assert "layers.0..95 (×96)" in out and "total" in out and "175 G" in out


def test_models_json_lists_the_zoo_with_sources(monkeypatch, capsys) -> None:
    records = json.loads(_run(monkeypatch, capsys, "models", "--json"))
    by_name = {r["name"]: r for r in records}
    assert by_name["llama3-8b"]["params"] == 8_030_261_248
    assert all(r["source"] for r in records)
    assert [r["name"] for r in records] == sorted(by_name)


def test_inspect_shows_a_tied_head(monkeypatch, capsys) -> None:
    # GPT-2 medium's head reuses the 50257 × 1024 embedding (51.5 M), counted in the embedding.
    out = _run(monkeypatch, capsys, "inspect", "gpt2-medium")
    assert "(+51.5 M tied)" in out
    doc = json.loads(_run(monkeypatch, capsys, "inspect", "gpt2-medium", "--json"))
    head = doc["layers"][-1]
    assert (head["tied_params"], head["tied_to"]) == (50257 * 1024, 0)
