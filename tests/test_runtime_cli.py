"""`hetplan launch` scripts (by content) and `hetplan dryrun` (end to end, plus plan shrinking)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from planner.costing import megatron_plan
from planner.errors import HetplanError
from planner.graph import load_model
from planner.graph.load_spec import load_model_spec
from planner.runtime.dry_run import shrink_plan, tiny_spec
from tests.cli import run_cli as _run
from tests.test_runtime_plans import make_plan, stage


def _model(name: str = "tiny") -> dict:
    return load_model_spec(name).model_dump(mode="json")


@pytest.fixture()
def mixed_plan_file(tmp_path: Path) -> Path:
    # Node big (3 GPUs) and node small (1 GPU); plan ranks interleave the nodes, so torchrun's
    # node-by-node numbering differs from the plan's: big = torch 0,1,2; small = torch 3.
    plan = make_plan(
        [{"microbatches": 4, "stages": [stage(0, 2, [0]), stage(2, 4, [1]),
                                        stage(4, 6, [2, 3])]}],
        model=_model(), nodes={0: ("big", 0), 1: ("small", 0), 2: ("big", 1), 3: ("big", 2)})
    # launch checks the plan against its cluster: a 3-GPU and a 1-GPU T4 node.
    data = plan.to_dict()
    data["cluster"] = {"name": "two-boxes", "nodes": [
        {"name": name, "count": 1, "gpu": "T4", "gpus_per_node": gpus, "intra_node": "pcie",
         "inter_node_gbps": 50} for name, gpus in (("big", 3), ("small", 1))]}
    for st in data["pipelines"][0]["stages"]:
        st["gpu"] = "T4"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def test_launch_scripts_per_node(mixed_plan_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "launch"
    code, text, err = _run(["launch", str(mixed_plan_file), "--out-dir", str(out), "--json"],
                           capsys)
    assert code == 0, err
    info = json.loads(text)
    assert info["world_size"] == 4
    nodes = {n["node"]: n for n in info["nodes"]}
    assert nodes["big"]["node_rank"] == 0 and nodes["small"]["node_rank"] == 1
    assert nodes["big"]["plan_ranks"] == [0, 2, 3] and nodes["big"]["torch_ranks"] == [0, 1, 2]
    assert nodes["small"]["plan_ranks"] == [1] and nodes["small"]["torch_ranks"] == [3]

    big = (out / "big.sh").read_text()
    small = (out / "small.sh").read_text()
    assert "--nnodes 2 --node-rank 0 --nproc-per-node 3" in big
    assert "--nnodes 2 --node-rank 1 --nproc-per-node 1" in small
    assert "export HETPLAN_NODE=small" in small
    assert "-m planner.runtime" in big and '"$MASTER_ADDR"' in big
    assert "#   local 1  ->  plan rank 2, torch rank 1" in big
    assert os.access(out / "big.sh", os.X_OK)
    assert subprocess.run(["bash", "-n", str(out / "big.sh")]).returncode == 0
    rows = (out / "ranks.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["plan_rank", "node", "node_rank", "local_rank", "torch_rank"]
    assert "1\tsmall\t1\t0\t3" in rows
    assert json.loads((out / "plan.json").read_text())["ranks"] == \
        json.loads(mixed_plan_file.read_text())["ranks"]


def test_launch_table_for_people(mixed_plan_file: Path, tmp_path: Path, capsys) -> None:
    code, text, _ = _run(["launch", str(mixed_plan_file), "--out-dir", str(tmp_path / "l")],
                         capsys)
    assert code == 0
    assert "big.sh" in text and "small.sh" in text and "0,2-3" in text


def test_dryrun_json_on_a_megatron_plan(tmp_path: Path, capsys) -> None:
    # A plan written the Megatron way (TP 2 × PP 2, one pipeline) for the tiny GPT, run by
    # the CLI: every gradient of the model compared with the one-process reference.
    from planner.cluster import load_cluster

    plan = megatron_plan(load_model("tiny"), load_cluster("lab-mixed"), tp=2, pp=2, dp=1,
                         micro_batch=2, global_batch=8, layers_per_stage=[3, 3],
                         recompute="full")
    path = tmp_path / "mega.json"
    plan.save(path)
    code, text, err = _run(["dryrun", str(path), "--json", "--steps", "2"], capsys)
    assert code == 0, err
    res = json.loads(text)
    assert res["ok"] is True
    assert res["max_grad_diff"] <= 1e-5
    assert abs(res["loss"] - res["reference_loss"]) <= 1e-5
    assert res["ranks"] == 4 and res["model"]["num_layers"] == 4
    assert "micro-batches shrink from 2 sequences to 1" in res["notes"][0]


def test_dryrun_bad_file_is_one_error_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{\"schema\": \"hetplan.plan/v1\"}")
    code, _, err = _run(["dryrun", str(path)], capsys)
    assert code == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_shrink_keeps_one_pipeline_per_shape_or_refuses() -> None:
    a = {"microbatches": 3, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2])]}
    b = {"microbatches": 3, "stages": [stage(0, 3, [3, 4]), stage(3, 6, [5])]}
    c = {"microbatches": 1, "stages": [stage(0, 6, [6])]}
    plan = make_plan([a, b, c], model=_model())
    small, notes = shrink_plan(plan, max_ranks=4)
    assert len(small.pipelines) == 2  # a (3 ranks) and c (1 rank); b repeats a's shape
    assert [p.microbatches for p in small.pipelines] == [3, 1]
    assert small.global_batch_size == 4 and len(small.ranks) == 4
    assert [st.ranks for st in small.pipelines[1].stages] == [(3,)]
    assert "DP 3 -> 2" in notes[0]
    with pytest.raises(HetplanError, match="pipeline 0 alone uses 3 ranks"):
        shrink_plan(plan, max_ranks=2)


def test_tiny_spec_keeps_depth_and_tp_divisibility() -> None:
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 3, [0, 1, 2, 3]),
                                                      stage(3, 6, [4, 5, 6])]}])
    spec = tiny_spec(_model("tiny-llama"), plan)
    assert spec.num_layers == 4
    for tp in (4, 3):
        assert spec.num_attention_heads % tp == 0 and spec.num_kv_heads % tp == 0
        assert spec.ffn_hidden_size % tp == 0
    assert spec.num_kv_heads < spec.num_attention_heads  # GQA stays GQA


def test_searched_plan_on_a_mixed_cluster_runs(tmp_path: Path, capsys) -> None:
    # Straight from the search: GPT-2 (AMP's model) on AMP's V100 + T4 cluster. The best plan
    # mixes GPU types across stages with uneven layers; dryrun keeps one pipeline (4 ranks).
    from planner.cluster import load_cluster
    from planner.search import plan as search_plan

    best = search_plan(load_model("gpt2-amp"), load_cluster("amp-het"), global_batch_size=32,
                       top_k=1).best
    path = tmp_path / "searched.json"
    best.save(path)
    code, text, err = _run(["dryrun", str(path), "--json", "--steps", "2", "--max-ranks", "4"],
                           capsys)
    assert code == 0, err
    res = json.loads(text)
    assert res["ok"] is True and res["max_grad_diff"] <= 1e-5
    assert res["model"]["num_layers"] == 24
    if len(best.ranks) > 4:
        assert any("dryrun keeps pipelines" in n for n in res["notes"])
    code, text, err = _run(["launch", str(path), "--out-dir", str(tmp_path / "l"), "--json"],
                           capsys)
    assert code == 0, err
    nodes = json.loads(text)["nodes"]
    assert sum(n["nproc_per_node"] for n in nodes) == len(best.ranks)
    assert {n["node"] for n in nodes} == {r.node for r in best.ranks}
