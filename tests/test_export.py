"""`hetplan export`: Megatron-LM arguments and torchtitan TOML from plans, and refusals.

Expected figures come from outside hetplan: Megatron-LM's own GPT-3 175B script
(examples/gpt3/train_gpt3_175b_distributed.sh: --tensor-model-parallel-size 8,
--pipeline-model-parallel-size 16, --micro-batch-size 1, --global-batch-size 1536,
--num-layers 96, --hidden-size 12288, --num-attention-heads 96, --seq-length 2048; Narayanan
et al. 2021, Table 1: 175B on 1536 GPUs, TP 8, PP 16), and the layer arithmetic of the splits
the tests write by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib

import planner
from planner.costing import estimate, megatron_plan, with_prediction
from planner.export import NotExpressible, export_plan
from planner.schema import Plan
from tests.cli import run_cli

SELENE = {"name": "selene-1536", "nodes": [
    {"name": "dgx", "count": 192, "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
     "intra_node": "nvlink", "inter_node_gbps": 1600}]}


def _args(text: str) -> dict[str, str | None]:
    """Megatron flags as printed (one per line, `\\` continuations, `#` comments)."""
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.removesuffix("\\").strip()
        if not line or line.startswith("#"):
            continue
        flag, _, value = line.partition(" ")
        out[flag] = value.strip().strip('"') or None
    return out


def _layout_counts(layout: str) -> list[str]:
    """Megatron's parse_str_to_list, applied to our strings (x*n unrolls to n x's)."""
    unrolled = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    return unrolled.split("|")


def _saved(model: str, cluster: object, tmp_path: Path, **kw: object) -> Path:
    m = planner.load_model(model)
    c = planner.cluster.cluster_from_dict(cluster) if isinstance(cluster, dict) else \
        planner.load_cluster(cluster)
    p = megatron_plan(m, c, **kw)
    path = tmp_path / "plan.json"
    with_prediction(p, estimate(m, c, p)).save(path)
    return path


def test_gpt3_175b_gives_megatrons_published_settings(tmp_path, capsys):
    path = _saved("gpt3-175b", SELENE, tmp_path, tp=8, pp=16, dp=12, micro_batch=1,
                  global_batch=1536)
    code, out, err = run_cli(["export", str(path), "--to", "megatron"], capsys)
    assert code == 0, err
    args = _args(out)
    for flag, value in {"--tensor-model-parallel-size": "8",
                        "--pipeline-model-parallel-size": "16", "--micro-batch-size": "1",
                        "--global-batch-size": "1536", "--num-layers": "96",
                        "--hidden-size": "12288", "--num-attention-heads": "96",
                        "--seq-length": "2048"}.items():
        assert args[flag] == value, flag
    # 96 layers over 16 stages split evenly: Megatron's default, no split flags.
    assert not {"--decoder-first-pipeline-num-layers", "--pipeline-model-parallel-layout",
                "--num-layers-per-virtual-pipeline-stage"} & set(args)
    assert "--use-distributed-optimizer" not in args and "--recompute-activations" not in args


@pytest.mark.parametrize(("counts", "first", "last", "layout"), [
    # chain counts include the embedding (first) and the head (last): blocks 5, 7, 7, 5
    ((6, 7, 7, 6), "5", "5", None),
    # blocks 5, 6, 8, 5: the middle stages differ, so only a layout can say it
    ((6, 6, 8, 6), None, None, ["Ettttt", "tttttt", "tttttttt", "tttttL"]),
])
def test_uneven_splits(tmp_path, counts, first, last, layout):
    path = _saved("gpt2-amp", "dgx-a100", tmp_path, tp=1, pp=4, dp=1, micro_batch=1,
                  global_batch=8, layers_per_stage=list(counts), recompute="selective",
                  zero1=False)
    args = _args(export_plan(Plan.load(path), "megatron"))
    assert args.get("--decoder-first-pipeline-num-layers") == first
    assert args.get("--decoder-last-pipeline-num-layers") == last
    got = args.get("--pipeline-model-parallel-layout")
    assert (got and _layout_counts(got)) == (layout if layout else None)
    assert "--recompute-activations" in args


def test_interleaved_even_uses_layers_per_virtual_stage(tmp_path):
    # 24 blocks over 4 stages x 2 chunks = 3 blocks per chunk.
    path = _saved("gpt2-amp", "dgx-a100", tmp_path, tp=2, pp=4, dp=2, micro_batch=1,
                  global_batch=16, schedule="interleaved", virtual_stages=2,
                  sequence_parallel=True, zero1=True, recompute="full")
    args = _args(export_plan(Plan.load(path), "megatron"))
    assert args["--num-layers-per-virtual-pipeline-stage"] == "3"
    assert "--sequence-parallel" in args and "--use-distributed-optimizer" in args
    assert args["--recompute-granularity"] == "full"


def test_torchtitan_toml_parses_and_splits_every_module_once(tmp_path, capsys):
    path = _saved("llama3-8b", "dgx-a100", tmp_path, tp=8, pp=2, dp=4, micro_batch=1,
                  global_batch=64, layers_per_stage=[15, 19])
    code, out, err = run_cli(["export", str(path), "--to", "torchtitan"], capsys)
    assert code == 0, err
    cfg = tomllib.loads(out)
    par = cfg["parallelism"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"],
            par["data_parallel_replicate_degree"]) == (8, 2, 4)
    assert par["pipeline_parallel_schedule"] == "1F1B"
    assert cfg["training"]["local_batch_size"] == 64 // 4
    parts = par["module_fqns_per_model_part"]
    # 15 chain layers = embedding + 14 blocks; 19 = 18 blocks + head (norm, output).
    assert parts[0] == ["tok_embeddings"] + [f"layers.{i}" for i in range(14)]
    assert parts[1] == [f"layers.{i}" for i in range(14, 32)] + ["norm", "output"]


def _mixed_plan(tmp_path: Path) -> Path:
    """gpt2-amp over one V100 and one T4 of amp-het (a mixed GPU pipeline)."""
    spec = planner.load_model("gpt2-amp").spec.model_dump(mode="json")
    cluster = planner.load_cluster("amp-het")
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({
        "schema": "hetplan.plan/v1", "model": spec, "cluster": cluster.spec,
        "global_batch_size": 32, "micro_batch_size": 1,
        "pipelines": [{"microbatches": 32, "stages": [
            {"layers": [0, 16], "gpu": "V100-SXM2-16GB", "tp": 1, "ranks": [0]},
            {"layers": [16, 26], "gpu": "T4", "tp": 1, "ranks": [1]}]}],
        "ranks": [{"rank": 0, "node": "p3-0", "local_rank": 0},
                  {"rank": 1, "node": "g4dn", "local_rank": 0}]}))
    return path


def test_mixed_pipeline_refused_with_nearest_plan(tmp_path, capsys):
    path = _mixed_plan(tmp_path)
    near = tmp_path / "near.json"
    code, out, err = run_cli(["export", str(path), "--to", "megatron", "--nearest-out",
                              str(near)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "mixed GPU pipelines" in err and "T4" in err and "Nearest expressible plan" in err
    saved = Plan.load(near)
    iter_s = float(re.search(r"predicted ([0-9.]+) s per iteration", err).group(1))
    assert saved.predicted["iteration_time_s"] == pytest.approx(iter_s, abs=1e-4)
    code, out, err = run_cli(["export", str(near), "--to", "megatron"], capsys)
    assert code == 0, err
    gpus = {s.gpu for p in saved.pipelines for s in p.stages}
    assert len(gpus) == 1


def test_per_stage_tp_and_gpt_on_torchtitan_refused(tmp_path):
    path = _saved("tiny-llama", "dgx-a100", tmp_path, tp=2, pp=2, dp=1, micro_batch=1,
                  global_batch=4)
    data = json.loads(path.read_text())
    stage = data["pipelines"][0]["stages"][1]
    stage["tp"], stage["ranks"] = 1, stage["ranks"][:1]
    data["ranks"] = data["ranks"][:3]
    with pytest.raises(NotExpressible, match="per-stage tensor parallelism: stages use TP 1, 2"):
        export_plan(Plan.from_dict(data), "torchtitan", nearest=False)
    gpt = _saved("gpt2-amp", "dgx-a100", tmp_path, tp=1, pp=2, dp=1, micro_batch=1,
                 global_batch=4)
    with pytest.raises(planner.HetplanError, match="Llama-family"):
        export_plan(Plan.load(gpt), "torchtitan")


def test_moe_plans_export_their_experts(tmp_path, capsys):
    # Without the MoE flags Megatron would build a dense model. Expected values: Mixtral's
    # config.json (8 experts, top-2, intermediate 14336) and DeepSeek-MoE-16B's (64 routed
    # experts, top-6, moe_intermediate_size 1408, 2 shared experts of 1408, first_k_dense_replace
    # 1 of 28 layers, norm_topk_prob false: softmax over all experts before the top-k).
    path = _saved("mixtral-8x7b", "dgx-a100", tmp_path, tp=2, pp=4, dp=8, ep=8, micro_batch=1,
                  global_batch=64)
    args = _args(export_plan(Plan.load(path), "megatron"))
    assert (args["--num-experts"], args["--moe-router-topk"], args["--moe-ffn-hidden-size"],
            args["--expert-model-parallel-size"]) == ("8", "2", "14336", "8")
    # TP 2 with EP 8: Megatron-Core's TransformerConfig refuses it without sequence parallel
    # ("When using expert parallelism and tensor parallelism, sequence parallelism must be
    # used"); the plan was priced without it, and a comment says so.
    text = export_plan(Plan.load(path), "megatron")
    assert "--sequence-parallel" in args
    assert "# --sequence-parallel added" in text and "priced without" in text
    assert not {"--moe-layer-freq", "--moe-router-pre-softmax",
                "--moe-shared-expert-intermediate-size"} & set(args)
    code, _, err = run_cli(["export", str(path), "--to", "torchtitan"], capsys)
    assert code == 2 and "8 experts" in err and len(err.strip().splitlines()) == 1

    deepseek = Path(__file__).parent / "fixtures" / "deepseek-moe-16b" / "config.json"
    path = _saved(str(deepseek), "dgx-a100", tmp_path, tp=1, pp=4, dp=16, ep=8, micro_batch=1,
                  global_batch=64)
    args = _args(export_plan(Plan.load(path), "megatron"))
    assert (args["--num-experts"], args["--moe-router-topk"], args["--moe-ffn-hidden-size"],
            args["--moe-shared-expert-intermediate-size"], args["--moe-layer-freq"],
            args["--expert-model-parallel-size"]) == ("64", "6", "1408", "2816",
                                                      "([0]*1+[1]*27)", "8")
    assert "--moe-router-pre-softmax" in args
    assert "--sequence-parallel" not in args  # TP 1: nothing to add


def test_zero_stage_above_one_is_said_not_exported_as_zero1(tmp_path):
    path = _saved("llama3-8b", "dgx-a100", tmp_path, tp=1, pp=1, dp=64, micro_batch=1,
                  global_batch=64, zero1=True, zero=3)
    text = export_plan(Plan.load(path), "megatron")
    assert "(ZeRO-3); --use-distributed-optimizer shards optimizer state only" in text
    toml = export_plan(Plan.load(path), "torchtitan")
    assert "ZeRO-1" not in toml  # FSDP is ZeRO-3 itself: nothing to warn about
    assert tomllib.loads(toml)["parallelism"]["data_parallel_shard_degree"] == 64


def test_a_plan_naming_no_framework_is_priced_for_the_export_target(tmp_path):
    # A plan file without predicted.framework (written before the field, or by hand): its
    # comment prices it for Megatron-Core, as the nearest-uniform fallback does, and says so.
    from planner.costing.framework import DEFAULT_FRAMEWORK, MEGATRON_CORE

    m, c = planner.load_model("gpt2-amp"), planner.load_cluster("dgx-a100")
    p = megatron_plan(m, c, tp=2, pp=2, dp=2, micro_batch=1, global_batch=16)
    for_megatron = estimate(m, c, p, framework=MEGATRON_CORE).iteration_time_s
    for_hetplan = estimate(m, c, p, framework=DEFAULT_FRAMEWORK).iteration_time_s
    assert f"{for_megatron:.4f}" != f"{for_hetplan:.4f}"  # the test tells the two apart
    data = with_prediction(p, estimate(m, c, p)).to_dict()
    data["predicted"].pop("framework", None)
    path = tmp_path / "plan.json"
    Plan.from_dict(data).save(path)
    text = export_plan(Plan.load(path), "megatron")
    assert (f"hetplan predicts {for_megatron:.4f} s per iteration" in text
            and "priced for megatron; the plan file names no framework" in text)
    assert "priced for another framework (the file names none)" in text  # stored: hetplan's
    # A plan that names its framework is priced for that one, with no such remark.
    data["predicted"]["framework"] = "hetplan"
    Plan.from_dict(data).save(path)
    text = export_plan(Plan.load(path), "megatron")
    assert f"{for_hetplan:.4f} s per iteration" in text and "names no framework" not in text
    assert "another framework" not in text
