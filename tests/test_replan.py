"""`hetplan replan`: re-planning after nodes or groups leave, and the state it moves."""

from __future__ import annotations

import json

import pytest

import planner
from cost_models.memory import GRAD_REDUCE_BYTES, state_bytes_per_param
from planner.cluster import load_cluster
from planner.cluster.load import bundled_clusters
from planner.replanning import _moves, replan
from planner.schema import Plan
from tests.cli import run_cli

_MIXED = [c for c in bundled_clusters() if len(load_cluster(c).groups) > 1]


@pytest.fixture(scope="module")
def tiny():
    return planner.load_model("tiny")


@pytest.mark.parametrize("cluster_name", _MIXED)
def test_removing_each_group_gives_valid_plans(tiny, cluster_name):
    cluster = load_cluster(cluster_name)
    start = planner.plan(tiny, cluster, global_batch_size=32).best
    for group in cluster.groups:
        r = replan(start, remove=[group.name])
        new = Plan.from_dict(json.loads(r.plan.to_json()))  # validates again from the bytes
        gone = set(group.node_names())
        assert not gone & {x.node for x in new.ranks}
        assert group.name not in {g["name"] for g in new.cluster["nodes"]}
        assert planner.estimate(None, None, new).feasible
        assert r.iteration_time_s_after <= r.fastest_iteration_time_s * 1.05 + 1e-12


def test_moved_bytes_are_the_layers_a_node_did_not_hold(tiny):
    """Old: one A100 holds everything. New: that A100 keeps [0, 3), a V100 takes [3, L)."""
    cluster = load_cluster("lab-mixed")
    n = len(tiny.graph.layers)
    common = {"model": tiny.spec.model_dump(mode="json"), "cluster": cluster.spec,
              "global_batch_size": 4, "micro_batch_size": 1}
    old = Plan.from_dict({**common, "pipelines": [{"microbatches": 4, "stages": [
        {"layers": [0, n], "gpu": "A100-SXM4-80GB", "tp": 1, "ranks": [0]}]}],
        "ranks": [{"rank": 0, "node": "a100-0", "local_rank": 0}]})
    new = Plan.from_dict({**common, "pipelines": [{"microbatches": 4, "stages": [
        {"layers": [0, 3], "gpu": "A100-SXM4-80GB", "tp": 1, "ranks": [0]},
        {"layers": [3, n], "gpu": "V100-SXM2-32GB", "tp": 1, "ranks": [1]}]}],
        "ranks": [{"rank": 0, "node": "a100-0", "local_rank": 0},
                  {"rank": 1, "node": "v100-0", "local_rank": 0}]})
    names = {"a100-0": "a100-0", "v100-0": "v100-0"}
    moves = _moves(old, new, tiny.graph, "bf16", names)
    per_param = state_bytes_per_param("bf16") - GRAD_REDUCE_BYTES  # fp32 weight + Adam m, v
    assert per_param == 12
    assert [(m.node, m.layers, m.sources) for m in moves] == [("v100-0", (3, n), ("a100-0",))]
    assert moves[0].bytes == sum(tiny.graph.layers[i].params for i in range(3, n)) * 12


def test_cli_remove_a_node(tmp_path, capsys):
    path, out = tmp_path / "p.json", tmp_path / "new.json"
    code, _, err = run_cli(["plan", "tiny", "lab-mixed", "--global-batch", "32", "-o",
                            str(path)], capsys)
    assert code == 0, err
    used = sorted({r.node for r in Plan.load(path).ranks})
    code, text, err = run_cli(["replan", str(path), "--remove", used[0], "-o", str(out)],
                              capsys)
    assert code == 0, err
    assert f"removed node {used[0]}" in text and "tokens/s" in text
    assert Plan.load(out).global_batch_size == 32
    code, _, err = run_cli(["replan", str(path), "--remove", "nosuch"], capsys)
    assert code == 2 and "nosuch" in err and len(err.strip().splitlines()) == 1
