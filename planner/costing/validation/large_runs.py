"""Large homogeneous runs: torchtitan (A100, H100), NeMo (H100), Llama 3 405B, historic runs.

Each row becomes a Megatron-style plan on a homogeneous cluster of 8-GPU nodes and we compare
throughput per GPU (tokens/s, or model TFLOP/s where that is what was published). Mapping:
- FSDP: torchtitan's FSDP2 shards parameters, gradients and optimizer state (ZeRO-3), the
  gradient reduction overlapped with the backward (`overlap_dp`), one micro-batch of
  `local_batch` sequences; its TP is sequence-parallel (torchtitan's TP plan shards the norms
  and the residual stream over the sequence). torchtitan_h100.csv's published peak memory is
  compared with our priced peak (group "peak memory", counted as the throughput is).
- torchtitan `selective layer` / `selective op` activation checkpointing -> our `selective`
  with torchtitan's policy (below; plain "selective" is its default, `op`); `full` -> `full`.
  NeMo and Megatron runs: distributed optimizer (zero1), overlap on, sequence parallelism
  when tp > 1, interleaving when vp > 1.
Counted in the throughput metric: plain bf16 rows, and NeMo's fp8 rows, context-parallel ones
at their cp. Reported but not counted: torch.compile and float8 variants (kernel fusion and fp8
scaling are not modelled) and torchtitan's and Llama 3's context parallelism.

Framework properties (`planner.costing.Framework`), each a property of the framework that made
the measurement, not a fitted constant:
- torchtitan's selective checkpointing is not Megatron's. `selective op` saves the outputs of
  matmuls and SDPA "except every second mm" (torchtitan `_custom_policy`, counted per block:
  wq, WK, wv, WO, w1, W3, w2), so it re-runs wk, wo and w3 and every elementwise op and
  keeps only those outputs and the block input (`cost_models.sac_activations`: 7.75 s·h
  for Llama 3 8B, not the ~20.5 s·h the whole eager block saves); `selective layer` fully
  checkpoints every second block (`selective_ac_option = 2`): half a forward on average,
  and the mean of the two blocks' saved bytes.
- NeMo (Megatron-core + Transformer Engine) fuses the norms, RoPE, SwiGLU/GeLU and residual
  chains: the blocks' memory-bound traffic is `cost_models.fusion.fused_traffic_ratio` of the
  eager graph's (0.31-0.32 for Llama, 0.9 for GPT).
- BLOOM and MT-NLG trained with full activation checkpointing and publish Megatron's TFLOP/s,
  whose formula (Narayanan et al. SC'21, 96·B·s·l·h²(1 + s/6h + V/16lh)) counts the
  recomputed forward: we estimate with `full` and count those FLOPs too (MT-NLG's 60.1 s per
  iteration on 2240 GPUs gives exactly its 126 TFLOP/s with that formula, 94 without).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

from cost_models.catalog import get_gpu
from cost_models.gpu import GpuSpec
from cost_models.profiles import ProfileSet
from planner.cluster.model import Cluster, NodeGroup
from planner.costing.estimate import estimate
from planner.costing.framework import (
    DEEPSPEED,
    MEGATRON_CORE,
    MEGATRON_STYLE,
    TORCHTITAN,
    Framework,
)
from planner.costing.megatron import megatron_plan
from planner.costing.published_stacks import MEGATRON_EAGER
from planner.costing.validation.common import FileReport, Row, graph_for, summarise
from planner.errors import HetplanError

__all__ = ["fused_framework", "large_run_reports", "large_run_row"]

_LLAMA = {"architecture": "llama", "training": {"precision": "bf16"}}
_GPT = {"architecture": "gpt", "training": {"precision": "bf16"}}
# Shapes from the models' published configs / papers (name: fields).
MODELS: dict[str, dict[str, Any]] = {
    "Llama3-8B": {"zoo": "llama3-8b"},
    "Llama3.1-8B": {"zoo": "llama3-8b"},
    "Llama3-70B": {"zoo": "llama3-70b"},
    "Llama3.1-70B": {"zoo": "llama3-70b"},
    "Llama3.1-405B": {"zoo": "llama3-405b"},
    "LLAMA3-8B": {"zoo": "llama3-8b"},
    "LLAMA3-70B": {"zoo": "llama3-70b"},
    "LLAMA3-405B": {"zoo": "llama3-405b"},
    "LLAMA3.1-405B": {"zoo": "llama3-405b"},
    # Llama 2 (Touvron et al. 2023, Table 1 and the HF config.json files).
    "Llama2-13B": {**_LLAMA, "name": "llama2-13b", "hidden_size": 5120, "num_layers": 40,
                   "num_attention_heads": 40, "ffn_hidden_size": 13824, "vocab_size": 32000},
    "Llama2-70B": {**_LLAMA, "name": "llama2-70b", "hidden_size": 8192, "num_layers": 80,
                   "num_attention_heads": 64, "num_kv_heads": 8, "ffn_hidden_size": 28672,
                   "vocab_size": 32000},
    "LLAMA2-7B": {**_LLAMA, "name": "llama2-7b", "hidden_size": 4096, "num_layers": 32,
                  "num_attention_heads": 32, "ffn_hidden_size": 11008, "vocab_size": 32000},
    "LLAMA2-13B": {**_LLAMA, "name": "llama2-13b", "hidden_size": 5120, "num_layers": 40,
                   "num_attention_heads": 40, "ffn_hidden_size": 13824, "vocab_size": 32000},
    "LLAMA2-70B": {**_LLAMA, "name": "llama2-70b", "hidden_size": 8192, "num_layers": 80,
                   "num_attention_heads": 64, "num_kv_heads": 8, "ffn_hidden_size": 28672,
                   "vocab_size": 32000},
    # NeMo GPT-3 configs (NeMo launcher conf/training/gpt3/{5b,20b,175b}.yaml).
    "GPT3-5B": {**_GPT, "name": "gpt3-5b", "hidden_size": 4096, "num_layers": 24,
                "num_attention_heads": 32, "vocab_size": 51200},
    "GPT3-20B": {**_GPT, "name": "gpt3-20b", "hidden_size": 6144, "num_layers": 44,
                 "num_attention_heads": 48, "vocab_size": 51200},
    "GPT3-175B": {"zoo": "gpt3-175b"},
    # MosaicML MPT (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_heads,
    # n_layers; expansion_ratio 4, vocab_size 50368, learned positions in the benchmark runs).
    **{f"mpt-{size}": {**_GPT, "name": f"mpt-{size}", "hidden_size": h, "num_layers": n,
                       "num_attention_heads": a, "vocab_size": 50368}
       for size, h, a, n in (("125m", 768, 12, 12), ("350m", 1024, 16, 24),
                             ("760m", 1536, 12, 24), ("1b", 2048, 16, 24), ("3b", 2560, 20, 32),
                             ("7b", 4096, 32, 32), ("13b", 5120, 40, 40), ("30b", 7168, 56, 48),
                             ("70b", 8192, 64, 80))},
    # BLOOM (BigScience 2022, Table 1); MT-NLG (Smith et al. 2022, §2): 105 layers, h20480.
    "BLOOM-176B": {**_GPT, "name": "bloom-176b", "hidden_size": 14336, "num_layers": 70,
                   "num_attention_heads": 112, "vocab_size": 250880},
    "MT-NLG-530B": {**_GPT, "name": "mt-nlg-530b", "hidden_size": 20480, "num_layers": 105,
                    "num_attention_heads": 128, "vocab_size": 51200},
}


def _graph(model: str, seq: int, precision: str) -> Any:
    spec = MODELS[model]
    base: dict[str, Any] | str = spec.get("zoo", spec)
    return graph_for(base, seq_len=seq, precision=precision)


CAUSAL_FLASH = 0.5
"""Causal flash attention (SDPA flash / cuDNN / TE fused) computes half the s×s blocks."""
TORCHTITAN_SELECTIVE_LAYER = dataclasses.replace(TORCHTITAN, sac_policy="torchtitan-layer")
"""torchtitan run with `selective_ac_option = 2` ("selective layer")."""
FLASH_ONLY = Framework(**MEGATRON_STYLE, name="flash-attention",
                       attention_flops_share=CAUSAL_FLASH, dp_overlap=True, attention_kernel="")
"""Llama 3's training stack (Dubey et al. 2024 §3.3): causal flash attention and overlapped DP
traffic; the paper does not describe fused kernels or TP overlap, so none is assumed, nor
which attention kernel it runs (its core stays at the GEMM rate). Its pipeline p2p keeps the
Megatron-style 1/tp per rank (`p2p_scatter_gather`), and sequence parallelism Megatron's (the
`sp_*` fields False), as priced before those fields existed."""


def fused_framework(model: str, graph: Any) -> Framework:
    """NeMo / Megatron-core with Transformer Engine: `hetplan frameworks`' megatron record
    (fused elementwise chains from each block's dimensions, overlapped DP and TP traffic)."""
    return MEGATRON_CORE


def _cluster(gpu: GpuSpec, gpus: int, nic_gbps: float) -> Cluster:
    nodes = max(1, gpus // 8)
    group = NodeGroup(name="n", count=nodes, gpu=gpu, gpus_per_node=8, intra_node="nvlink",
                      intra_node_gb_per_s=gpu.intra_node_gb_per_s, inter_node_gbps=nic_gbps,
                      price_per_gpu_hour=gpu.price_per_gpu_hour)
    return Cluster(name=f"{gpus}x{gpu.name}", groups=(group,), latency_us=5.0, spec={})


def _h100_96gb() -> GpuSpec:
    """torchtitan's H100s: 96 GB HBM2e at 2.4 TB/s and 500 W (data README: throughput "between
    PCIe and SXM"). We take the midpoint of the catalog's H100 PCIe and SXM dense peaks."""
    sxm, pcie = get_gpu("H100-SXM5-80GB"), get_gpu("H100-PCIE-80GB")
    peaks = {k: (v + pcie.peak_tflops.get(k, v)) / 2 for k, v in sxm.peak_tflops.items()}
    return dataclasses.replace(sxm, name="H100-96GB-HBM2e-500W", memory_gib=96 * 1e9 / 2**30,
                               hbm_gb_per_s=2400.0, peak_tflops=peaks)


_H100_96 = _h100_96gb()


def _run(model: str, seq: int, precision: str, gpu: GpuSpec, gpus: int, nic_gbps: float,
         tp: int, pp: int, vp: int, mb: int, gbs: int, recompute: str, fsdp: bool,
         profiles: ProfileSet, framework: Any = None,
         count_recompute: bool = False,
         overlap_dp: bool = True, cp: int = 1,
         zero: int = 1, sp: bool | None = None) -> tuple[float, float, bool, str, float]:
    """(tokens/s per GPU, model TFLOP/s per GPU, feasible, framework name, peak memory GiB of
    the fullest GPU) for one configuration.

    `framework(model, graph)` gives the executing framework; `count_recompute` counts the
    recomputed forward in the TFLOP/s (Megatron's published convention). `cp`: context-
    parallel degree (the plan's per-stage cp; dp is what is left of the GPUs); `zero`: the
    ZeRO stage (1: distributed optimizer; 3: parameters sharded too, Megatron-FSDP / FSDP);
    `sp`: sequence parallelism with TP (None: on for the Megatron runs, off for FSDP ones)."""
    # fp8 recipes keep bf16 activations and master weights: the graph is built in bf16.
    graph = _graph(model, seq, "bf16" if precision == "fp8" else precision)
    dp = gpus // (tp * pp * cp)
    cluster = _cluster(gpu, gpus, nic_gbps)
    per_pipe = gbs // (dp * mb)
    schedule = "interleaved" if vp > 1 and per_pipe % pp == 0 else "1f1b"
    plan = megatron_plan(graph, cluster, tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=gbs,
                         recompute=recompute,
                         sequence_parallel=tp > 1 and (not fsdp if sp is None else sp),
                         schedule=schedule, virtual_stages=vp if schedule == "interleaved" else 1,
                         zero1=True, zero=zero, cp=cp)
    fw = MEGATRON_EAGER if framework is None else framework(model, graph)
    est = estimate(graph, cluster, plan, profiles=profiles, precision=precision,
                   overlap_dp=overlap_dp, framework=fw)
    per_gpu = est.tokens_per_s / gpus
    flops = graph.train_flops
    if count_recompute and recompute == "full":
        # Only the transformer layers are recomputed (the runtimes checkpoint those alone;
        # Narayanan et al. SC'21's 96·B·s·l·h²(1 + s/6h + V/16lh) counts the logits 3×).
        flops += sum(x.fwd_flops for x in graph.layers if x.kind not in ("embedding", "head"))
    tflops = flops * gbs / est.iteration_time_s / gpus / 1e12
    return per_gpu, tflops, est.feasible, fw.name, max(st.peak_memory_gib for st in est.stages)


def _costed(label: str, measured: float, *run_args: Any, tflops: bool = False,
            used: bool = True, note: str = "", **run_kwargs: Any) -> Row:
    """One row from `_run(*run_args, **run_kwargs)` (tokens/s per GPU, or TFLOP/s per GPU with
    `tflops`); a configuration that cannot be expressed becomes an uncounted row saying why."""
    try:
        tok, tf, feasible, fw_name, peak = _run(*run_args, **run_kwargs)
    except (HetplanError, KeyError, ValueError) as exc:
        return Row(label, measured, None, used=False, note=str(exc))
    return Row(label, measured, tf if tflops else tok, feasible=feasible, used=used, note=note,
               framework=fw_name, peak_gib=peak)


large_run_row = _costed
"""One priced row (the other measurement modules' entry point; arguments as `_costed`)."""


def _ac(text: str) -> str:
    return "none" if text == "none" else ("full" if text == "full" else "selective")


def _torchtitan(path: Path, profiles: ProfileSet, h100: bool) -> tuple[list[Row], list[Row]]:
    """(throughput rows, peak-memory rows of the files that publish it), FSDP2 at ZeRO-3."""
    rows, memory = [], []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            model = r["model"].split(" ")[0]
            label = f"{r['model']} {r['gpus']} GPUs {r['parallelism']} {r['activation_ckpt']}"
            prec_txt = r.get("precision", "bf16")
            if "Float8" in r["model"]:
                prec_txt = "fp8"
            label += f" {prec_txt}"
            measured = float(r["tokens_per_s_per_gpu"])
            par = r["parallelism"]
            if "CP" in par and "CP1" not in par:
                rows.append(Row(label, measured, None, used=False,
                                note="context parallelism not modelled"))
                if r.get("peak_mem_GiB"):
                    memory.append(dataclasses.replace(rows[-1],
                                                      measured=float(r["peak_mem_GiB"])))
                continue
            tp = int(par.split("TP")[1].split()[0]) if "TP" in par else 1
            pp = int(par.split("PP")[1].split()[0]) if "PP" in par else 1
            gpus = int(r["gpus"])
            lb = int(r["local_batch"])
            seq = int(r["seq_len"])
            precision = "fp8" if "fp8" in prec_txt else "bf16"
            gpu = _H100_96 if h100 or "H100" in r.get("gpu", "") else get_gpu("A100-SXM4-80GB")
            nic = 3200.0 if gpu is _H100_96 else 1600.0
            dp = gpus // (tp * pp)
            # torchtitan's local batch is per data-parallel rank; with PP it is split into
            # `pipeline_parallel_microbatches` micro-batches, by default the PP degree (its
            # 2024 `build_pipeline_schedule`: `n_microbatches or pipeline_parallel_degree`),
            # otherwise one micro-batch.
            mb = max(1, lb // pp)
            ac = r["activation_ckpt"]
            # "selective" alone is torchtitan's default `selective_ac_option = 'op'` (its
            # llama3_8b.toml), which the H100 tables ran.
            policy = ("layer" if "layer" in ac else "op") if ac.startswith("selective") else ""
            # The record prices its policy from each block's own dimensions (sac_cost.py).
            tt = TORCHTITAN_SELECTIVE_LAYER if policy == "layer" else TORCHTITAN
            plain = precision == "bf16" and "compile" not in prec_txt
            row = _costed(
                label, measured, model, seq, precision, gpu, gpus, nic, tp, pp,
                2 if "interleaved" in par else 1, mb, lb * dp, _ac(ac), True, profiles,
                lambda m, g, fw=tt: fw,
                used=plain, note="" if plain else "torch.compile / float8 not modelled", zero=3,
                sp=True)
            if row.predicted is not None and not row.feasible:
                row = dataclasses.replace(row, note=(row.note + "; " if row.note else "")
                                          + "we price OOM")
            rows.append(row)
            if r.get("peak_mem_GiB"):
                memory.append(dataclasses.replace(row, measured=float(r["peak_mem_GiB"]),
                                                  predicted=row.peak_gib))
    return rows, memory


def _nemo(path: Path, profiles: ProfileSet) -> list[Row]:
    """NeMo 24.07 on DGX-H100 (8 × 400 Gb/s per node), FP8, as its performance table lists."""
    rows = []
    h100 = get_gpu("H100-SXM5-80GB")
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            tp, pp, cp, vp = (int(r[k]) for k in ("tp", "pp", "cp", "vp"))
            label = f"{r['model']} {r['gpus']} GPUs tp{tp} pp{pp} cp{cp} vp{vp}"
            measured = float(r["tokens_per_s_per_gpu"])
            if r["model"] not in MODELS:
                rows.append(Row(label, measured, None, used=False, note="model shape not known"))
                continue
            rows.append(_costed(
                label, measured, r["model"], int(r["seq"]), "fp8", h100, int(r["gpus"]), 3200.0,
                tp, pp, vp, int(r["mbs"]), int(r["gbs"]), "none", False, profiles,
                fused_framework, cp=cp))
    return rows


def _llama3(path: Path, profiles: ProfileSet) -> list[Row]:
    """Llama 3 405B pre-training (Dubey et al. 2024, Table 4): bf16 model TFLOP/s per GPU;
    H100 SXM, 8 per node, 400 Gb/s RoCE per GPU; interleaved pipeline (the paper's schedule;
    the virtual-stage count is not given: we take 4, two layers per chunk)."""
    rows = []
    h100 = get_gpu("H100-SXM5-80GB")
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            tp, cp, pp, dp = (int(r[k]) for k in ("tp", "cp", "pp", "dp"))
            label = f"{r['gpus']} GPUs tp{tp} cp{cp} pp{pp} dp{dp} seq {r['seq_len']}"
            measured = float(r["tflops_per_gpu"])
            if cp > 1:
                rows.append(Row(label, measured, None, used=False,
                                note="context parallelism not modelled"))
                continue
            mbs = int(r["batch_per_dp"])
            rows.append(_costed(
                label, measured, "Llama3.1-405B", int(r["seq_len"]), "bf16", h100,
                int(r["gpus"]), 3200.0, tp, pp, 4, 1, mbs * dp, "none", False, profiles,
                lambda m, g: FLASH_ONLY, tflops=True))
    return rows


# Historic runs with a published parallel layout (historic_runs.csv); model TFLOP/s per GPU.
# BLOOM: TP4 PP12 DP8 on 48 nodes of 8 A100 80GB, 4 × 100 Gb/s Omni-Path per node, micro-batch
# 2, GBS 2048 (BigScience training README). MT-NLG: TP8 PP35 on DGX A100 (8 × 200 Gb/s HDR),
# micro-batch 1, GBS 1920 (Smith et al. 2022, §2.4). Other rows lack a layout we can model.
# Neither ran sequence parallelism: it was published in May 2022 (Korthikanti et al., arXiv
# 2205.05198), after MT-NLG's 2021 training (Smith et al. 2022 §2: tensor, pipeline and data
# parallelism) and BLOOM's Megatron-DeepSpeed run from March 2022 (BLOOM paper, arXiv
# 2211.05100 §3.4: ZeRO-1, tensor and pipeline parallelism); so sp=False.
_HISTORIC = [
    ("BLOOM-176B TP4 PP12 DP8, 384 A100", "BLOOM-176B", 384, 400.0, 4, 12, 2, 2048, 150.0),
    ("MT-NLG 530B TP8 PP35 DP8, 2240 A100", "MT-NLG-530B", 2240, 1600.0, 8, 35, 1, 1920, 126.0),
    ("MT-NLG 530B TP8 PP35 DP10, 2800 A100", "MT-NLG-530B", 2800, 1600.0, 8, 35, 1, 1920, 121.0),
    ("MT-NLG 530B TP8 PP35 DP12, 3360 A100", "MT-NLG-530B", 3360, 1600.0, 8, 35, 1, 1920, 113.0),
]


def _historic(profiles: ProfileSet) -> list[Row]:
    rows = []
    a100 = get_gpu("A100-SXM4-80GB")
    for label, model, gpus, nic, tp, pp, mb, gbs, measured in _HISTORIC:
        rows.append(_costed(
            label, measured, model, 2048, "bf16", a100, gpus, nic, tp, pp, 1, mb, gbs, "full",
            False, profiles, lambda m, g: DEEPSPEED, count_recompute=True,
            overlap_dp=False, tflops=True, sp=False))
    return rows


def large_run_reports(data_dir: Path, profiles: ProfileSet) -> list[FileReport]:
    target = "throughput within 10 %"
    out = []
    for name, h100 in (("torchtitan_a100.csv", False), ("torchtitan_h100.csv", True)):
        if (data_dir / name).exists():
            rows, memory = _torchtitan(data_dir / name, profiles, h100)
            out.append(summarise(name, "all", "tokens/s/GPU", rows, target,
                                 lower_is_better=False))
            if memory:  # counted as the throughput is: plain bf16 rows
                out.append(summarise(name, "peak memory", "GiB", memory, "informational",
                                     ranking=False))
    for name, fn in (("nemo_h100.csv", lambda p: _nemo(p, profiles)),
                     ("llama3_405b.csv", lambda p: _llama3(p, profiles))):
        path = data_dir / name
        if path.exists():
            quantity = "TFLOP/s/GPU" if name.startswith("llama3") else "tokens/s/GPU"
            out.append(summarise(name, "all", quantity, fn(path), target,
                                 lower_is_better=False))
    if (data_dir / "historic_runs.csv").exists():
        out.append(summarise("historic_runs.csv", "all", "TFLOP/s/GPU", _historic(profiles),
                             target, lower_is_better=False))
    return out
