"""A plan made from a user's own nn.Module (`planner.from_module`) is saved with its measured
layer table and factory, then estimated, simulated, dry-run and launched from the file."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import planner
from planner.cluster import cluster_from_dict
from planner.costing import megatron_plan
from planner.errors import HetplanError
from tests.cli import run_cli as _run
from tests.user_models import S, make_net

FACTORY = "tests.user_models:make_net"
CLUSTER = {"name": "four-t4", "nodes": [
    {"name": "box", "count": 1, "gpu": "T4", "gpus_per_node": 4, "intra_node": "pcie",
     "inter_node_gbps": 50}]}


@pytest.fixture(scope="module")
def model():
    return planner.from_module(make_net(), torch.zeros(2, S, dtype=torch.long), name="usernet",
                               factory=FACTORY)


@pytest.fixture(scope="module")
def cluster():
    return cluster_from_dict(CLUSTER)


def test_searched_module_plan_is_priced_from_the_file_as_from_the_module(
        model, cluster, tmp_path: Path, capsys) -> None:
    best = planner.plan(model, cluster, global_batch_size=8).best
    path = tmp_path / "searched.json"
    best.save(path)
    embedded = json.loads(path.read_text())["model"]
    assert embedded["source"] == "module" and embedded["factory"] == FACTORY
    assert embedded["precision"] == "fp32" and len(embedded["graph"]["layers"]) == 6
    code, out, err = _run(["estimate", str(path), "--json"], capsys)
    assert code == 0, err
    # The file's layer table prices the plan exactly as the live module's measurement does.
    live = planner.estimate(model, cluster, best)
    from_file = planner.estimate(None, None, planner.Plan.load(path))
    assert from_file.iteration_time_s == live.iteration_time_s
    assert [s.peak_memory_gib for s in from_file.stages] == [
        s.peak_memory_gib for s in live.stages]
    assert json.loads(out)["iteration_time_s"] == pytest.approx(live.iteration_time_s,
                                                                abs=1e-8)  # printed rounded
    code, _, err = _run(["simulate", str(path)], capsys)
    assert code == 0, err


def test_module_plan_dryruns_and_launches(model, cluster, tmp_path: Path, capsys) -> None:
    # TP 2 × PP 2: the user's blocks split by their `tp_plan`, checked against one process.
    plan = megatron_plan(model, cluster, tp=2, pp=2, dp=1, micro_batch=1, global_batch=4)
    path = tmp_path / "tp2pp2.json"
    plan.save(path)
    code, out, err = _run(["dryrun", str(path), "--json", "--steps", "2"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["ok"] is True and res["ranks"] == 4 and res["max_grad_diff"] <= 1e-5
    assert res["model"]["num_layers"] == 4 and res["model"]["hidden_size"] == 32
    assert any("nn.Module" in n for n in res["notes"])
    out_dir = tmp_path / "launch"
    code, _, err = _run(["launch", str(path), "--out-dir", str(out_dir)], capsys)
    assert code == 0, err
    assert json.loads((out_dir / "plan.json").read_text())["model"]["factory"] == FACTORY


def test_without_a_factory_it_prices_but_does_not_run(cluster, tmp_path: Path,
                                                      capsys) -> None:
    bare = planner.from_module(make_net(), torch.zeros(2, S, dtype=torch.long))
    plan = megatron_plan(bare, cluster, tp=1, pp=2, dp=1, micro_batch=1, global_batch=4)
    path = tmp_path / "bare.json"
    plan.save(path)
    code, _, err = _run(["estimate", str(path)], capsys)
    assert code == 0, err
    for argv in (["dryrun", str(path)], ["launch", str(path), "--out-dir",
                                         str(tmp_path / "l")]):
        code, _, err = _run(argv, capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert "factory: missing" in err and "planner.from_module" in err
    assert not (tmp_path / "l").exists()
    with pytest.raises(HetplanError, match="cannot import nowhere.models:make"):
        planner.from_module(make_net(), torch.zeros(2, S, dtype=torch.long),
                            factory="nowhere.models:make")


@pytest.mark.parametrize(("path", "value", "words"), [
    ("graph.layers.1.fwd_flops", -1.0, "graph.layers.1: fwd_flops: expected a finite number"),
    ("graph.layers.2.index", 7, "graph.layers.2: index: 7; layers must be numbered 0..5"),
    ("graph.layers.1.max_tp", 0, "max_tp: expected an integer >= 1"),
    ("graph.seq_len", 0, "graph.seq_len: expected a positive integer"),
    ("precision", "fp8", "precision: 'fp8'; use bf16, fp16 or fp32"),
    ("factory", "no-colon", "factory: 'no-colon'; write it as 'package.module:function'"),
    ("graph.dtype_bytes", 2, "graph.dtype_bytes: 2 but precision fp32"),
])
def test_a_broken_layer_table_is_one_line(model, cluster, path, value, words, tmp_path: Path,
                                          capsys) -> None:
    plan = megatron_plan(model, cluster, tp=1, pp=2, dp=1, micro_batch=1, global_batch=4)
    data = copy.deepcopy(plan.to_dict())
    cur = data["model"]
    *head, last = path.split(".")
    for key in head:
        cur = cur[int(key)] if isinstance(cur, list) else cur[key]
    cur[int(last) if isinstance(cur, list) else last] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    for argv in (["estimate", str(bad)], ["simulate", str(bad)], ["dryrun", str(bad)]):
        code, _, err = _run(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and words in err, (argv, err)
