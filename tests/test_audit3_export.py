"""`hetplan export` of plans the target cannot run as written (audit 3)."""

from __future__ import annotations

import json

import pytest

from planner.cluster import load_cluster
from planner.costing import megatron_plan
from planner.graph import load_model
from tests.cli import run_cli


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_uneven_shard_fractions_are_not_exported_as_even_ones(tmp_path, capsys,
                                                              target) -> None:
    # Megatron's distributed optimizer and torchtitan's FSDP shard evenly over DP: the config
    # was printed as if the plan's 0.4 / 0.2 / 0.2 / 0.2 shards were even, and its predicted
    # time priced the uneven shards.
    plan = megatron_plan(load_model("tiny-llama"), load_cluster("dgx-a100"), tp=1, pp=1, dp=4,
                         micro_batch=1, global_batch=4, zero=1)
    data = plan.to_dict()
    for pipe, fraction in zip(data["pipelines"], (0.4, 0.2, 0.2, 0.2), strict=True):
        pipe["shard_fraction"] = fraction
    path = tmp_path / "uneven.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(["export", str(path), "--to", target], capsys)
    assert code == 2 and out == "", err
    assert err.startswith("error:") and "uneven ZeRO shards" in err and "0.4" in err
    assert "Traceback" not in err
    # The same plan with even shards exports.
    even = tmp_path / "even.json"
    plan.save(even)
    code, out, err = run_cli(["export", str(even), "--to", target], capsys)
    assert code == 0 and out, err


def test_a_plan_that_breaks_a_rule_is_refused_not_exported(tmp_path, capsys) -> None:
    # The embedded model says 5 blocks, the stages cover 4: Megatron would have been told
    # --num-layers 5 for a plan priced on 4, with only a "no prediction" comment, exit 0.
    plan = megatron_plan(load_model("tiny-llama"), load_cluster("dgx-a100"), tp=1, pp=1, dp=2,
                         micro_batch=1, global_batch=2)
    data = plan.to_dict()
    data["model"]["num_layers"] = 5
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(["export", str(path), "--to", "megatron"], capsys)
    assert code == 2 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "layers [0, 6)" in lines[0]


def test_no_nearest_plan_says_which_grid_was_searched(tmp_path, capsys) -> None:
    # A GPipe plan of global batch 4 on dgx-a100: no layout over all 64 GPUs takes a batch of
    # 4, and the message said "no uniform plan fits this cluster", though tp 2 × pp 2 × dp 2
    # with 1F1B does.
    plan = megatron_plan(load_model("tiny-moe"), load_cluster("dgx-a100"), tp=2, pp=2, dp=2,
                         ep=2, micro_batch=1, global_batch=4, schedule="gpipe")
    path = tmp_path / "gpipe.json"
    plan.save(path)
    code, out, err = run_cli(["export", str(path), "--to", "megatron"], capsys)
    assert code == 2 and out == "", err
    assert "no GPipe schedule" in err and "all the GPUs of one type" in err
    assert "global batch 4" in err and len(err.strip().splitlines()) == 1
