"""Adversarial plan files (audit 3): a hand-edited field is one `error:` line (exit 2) or a
right answer, never a traceback or a silently wrong estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.cluster import load_cluster
from planner.costing import megatron_plan
from planner.graph import load_model
from tests.cli import run_cli


def _plan_file(tmp_path: Path, model: str, edit: Any = None, **flags: Any) -> Path:
    """A Megatron-style plan of `model` on dgx-a100 saved as JSON, after `edit(dict)`."""
    plan = megatron_plan(load_model(model), load_cluster("dgx-a100"), micro_batch=1, **flags)
    data = plan.to_dict()
    if edit is not None:
        edit(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _one_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], err


@pytest.mark.parametrize("value", [1.5, float("nan"), float("inf"), "0.25", True])
def test_shard_fraction_out_of_range_or_not_a_number_is_one_error(tmp_path, capsys,
                                                                  value) -> None:
    def edit(d: dict) -> None:
        for pipe in d["pipelines"]:
            pipe["shard_fraction"] = value

    path = _plan_file(tmp_path, "tiny-llama", edit, tp=1, pp=1, dp=4, global_batch=4, zero=1)
    code, _, err = run_cli(["estimate", str(path)], capsys)
    _one_error(code, err, "shard_fraction")


def _set_ep(ep: int) -> Any:
    def edit(d: dict) -> None:
        for pipe in d["pipelines"]:
            for st in pipe["stages"]:
                st["ep"] = ep
    return edit


def test_ep_that_does_not_divide_the_experts_is_one_error(tmp_path, capsys) -> None:
    # tiny-moe has 4 experts: --ep 8 is refused on the command line, and so in a plan file
    # (it was priced as if each GPU held half an expert).
    path = _plan_file(tmp_path, "tiny-moe", _set_ep(8), tp=1, pp=1, dp=8, global_batch=8, ep=2)
    code, _, err = run_cli(["estimate", str(path)], capsys)
    _one_error(code, err, ".ep", "ep 8 does not divide the 4 experts")


def test_ep_on_a_dense_model_is_one_error(tmp_path, capsys) -> None:
    # It was accepted, and priced ZeRO-3 at ZeRO-1's memory ("no expert-parallel stage").
    path = _plan_file(tmp_path, "tiny-llama", _set_ep(2), tp=1, pp=1, dp=4, global_batch=4,
                      zero=3)
    code, _, err = run_cli(["estimate", str(path)], capsys)
    _one_error(code, err, ".ep", "no routed experts")


def test_replan_of_a_broken_plan_names_the_file(tmp_path, capsys) -> None:
    # The error said "plan: pipelines.0..." instead of the file the user gave.
    path = _plan_file(tmp_path, "tiny-moe", _set_ep(8), tp=1, pp=1, dp=8, global_batch=8, ep=2)
    code, _, err = run_cli(["replan", str(path), "--remove", "dgx-1"], capsys)
    _one_error(code, err, f"error: {path}: ", "ep 8 does not divide")


@pytest.mark.parametrize("flags", [["--zero", "3"], ["--zero1"], ["--cp", "2"], ["--tp", "1"],
                                   ["--recompute", "full", "--micro-batch", "2"]])
def test_layout_flags_with_a_plan_file_are_refused_not_ignored(tmp_path, capsys,
                                                               flags) -> None:
    # `estimate plan.json --zero 3` printed the plan's own ZeRO-1 figures, exit 0.
    path = _plan_file(tmp_path, "tiny-llama", None, tp=1, pp=1, dp=4, global_batch=4, zero=1)
    code, out, err = run_cli(["estimate", str(path), *flags, "--json"], capsys)
    _one_error(code, err, flags[0], "states its own layout")
    assert out == ""


def test_a_plan_file_takes_the_pricing_flags(tmp_path, capsys) -> None:
    path = _plan_file(tmp_path, "tiny-moe", None, tp=1, pp=1, dp=4, global_batch=4, ep=2)
    code, out, err = run_cli(["estimate", str(path), "--capacity-factor", "2", "--framework",
                              "megatron", "--seq-len", "64", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["moe"]["capacity_factor"] == 2


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_a_model_file_given_as_a_plan_says_so(tmp_path, capsys, command) -> None:
    # A config.json without a cluster is read as a plan: "global_batch_size: Field required".
    config = Path(__file__).parent / "fixtures" / "deepseek-moe-16b" / "config.json"
    code, _, err = run_cli([command, str(config)], capsys)
    _one_error(code, err, "is a model, not a plan")


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_a_plan_file_given_as_a_model_says_so(tmp_path, capsys, command) -> None:
    # It said "architecture: missing; add it".
    path = _plan_file(tmp_path, "tiny-llama", None, tp=1, pp=1, dp=2, global_batch=2)
    code, _, err = run_cli([command, str(path), "dgx-a100"], capsys)
    _one_error(code, err, "is a plan file, not a model")
