"""MosaicML's published MPT training benchmarks (llm-foundry), `mpt_llm_foundry.csv`.

Each row of llm-foundry's `scripts/train/benchmarking/README.md` result tables: an MPT model
(shapes from its `mpt-*.yaml`), sequence length, GPUs (8 per node), micro-batch × gradient
accumulation, precision, FSDP sharding strategy and activation checkpointing, and the measured
tokens/s per GPU. Every row is data parallel over all its GPUs with PyTorch FSDP FULL_SHARD,
priced as `large_runs` prices torchtitan's FSDP rows: sharded optimizer state with the gradient
reduction overlapped (`dp_overlap`); parameter sharding is not modelled, so memory verdicts are
reported, not used. Activation checkpointing True checkpoints every MPT block: `full`.

Network: the A100 tables state 1600 Gb/s per node (RoCE); the H100 tables state none, and we
take a DGX H100's 8 × 400 Gb/s (it only matters for the multi-node rows).

Counted: bf16 rows (`amp_bf16`, and `bf16` with FSDP's PURE mixed precision). Reported, not
counted: `amp_fp8` rows (TransformerEngine fp8 linears inside an eager FSDP stack: its fp8
scaling and casts are not modelled, as for torchtitan's float8 rows).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from cost_models.catalog import get_gpu
from cost_models.profiles import ProfileSet
from planner.costing.framework import TORCHTITAN, Framework
from planner.costing.validation.common import FileReport, Row, summarise
from planner.costing.validation.large_runs import MODELS, large_run_row

__all__ = ["LLM_FOUNDRY", "MPT_FILE", "mpt_reports"]

MPT_FILE = "mpt_llm_foundry.csv"

_GPUS = {"h100_80gb": "H100-SXM5-80GB", "a100_80gb": "A100-SXM4-80GB",
         "a100_40gb": "A100-SXM4-40GB"}

DGX_H100_NIC_GBPS = 3200.0
"""NVIDIA DGX H100 datasheet: 8 × 400 Gb/s ConnectX-7 per node (the H100 tables state none)."""

LLM_FOUNDRY = dataclasses.replace(
    TORCHTITAN, name="llm-foundry", attention_kernel="triton-fa1",
    fsdp_whole_stage_under_pp=False,  # Composer FSDP, no pipeline schedule
    fp8="TransformerEngine te.Linear fp8 (precision amp_fp8); not counted",
    sources=(
        "llm-foundry MPT attention: attn_impl triton (scripts/train/benchmarking/"
        "submit_benchmarks.py --attn_impl default 'triton': flash_attn_triton.py, the "
        "FlashAttention Triton kernel), causal",
        "Composer FSDP FULL_SHARD (fsdp_config.sharding_strategy) with limit_all_gathers: "
        "parameter all-gather prefetched during forward, gradient reduce-scatter during "
        "backward",
        "eager PyTorch modules, no torch.compile; asynchronous CUDA launches"))
"""MosaicML llm-foundry on Composer: the same execution properties as torchtitan's record
(causal flash attention, overlapped FSDP traffic, eager kernels), under its own name, with its
benchmarks' attention kernel (`cost_models.attention`: the FlashAttention Triton kernel)."""


def _framework(model: str, graph: object) -> Framework:
    return LLM_FOUNDRY


def _rows(path: Path, profiles: ProfileSet) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            gpus, mb, gbs = int(r["gpus"]), int(r["micro_batch"]), int(r["global_batch"])
            ac = r["activation_checkpointing"] == "True"
            fp8 = r["precision"] == "amp_fp8"
            label = (f"{r['model']} {r['gpus']} GPUs seq {r['seq_len']} mb {mb}"
                     f"x{r['grad_accum']} {r['precision']}{' ckpt' if ac else ''}")
            group = r["gpu"] + (" fp8" if fp8 else "")
            measured = float(r["tokens_per_s_per_gpu"])
            gpu_name = _GPUS.get(r["gpu"])
            if gpu_name is None or r["model"] not in MODELS:
                groups.setdefault(group, []).append(Row(
                    label, measured, None, used=False, note="GPU or model shape not known"))
                continue
            nic = float(r["node_nic_gbps"]) if r["node_nic_gbps"] else DGX_H100_NIC_GBPS
            row = large_run_row(
                label, measured, r["model"], int(r["seq_len"]), "fp8" if fp8 else "bf16",
                get_gpu(gpu_name), gpus, nic, 1, 1, 1, mb, gbs, "full" if ac else "none", True,
                profiles, _framework, used=not fp8,
                note="fp8 (TransformerEngine in eager FSDP) not modelled" if fp8 else "")
            if row.predicted is not None and not row.feasible:
                row = dataclasses.replace(row, note=(row.note + " (no FSDP param sharding: "
                                                     "OOM verdict not used)").strip())
            groups.setdefault(group, []).append(row)
    return groups


def mpt_reports(data_dir: Path, profiles: ProfileSet) -> list[FileReport]:
    """Per GPU table (a100_40gb, a100_80gb, h100_80gb, h100_80gb fp8) and all rows together."""
    path = data_dir / MPT_FILE
    if not path.exists():
        return []
    groups = _rows(path, profiles)
    target = "throughput within 10 %"
    out = [summarise(MPT_FILE, name, "tokens/s/GPU", rows, target, lower_is_better=False)
           for name, rows in sorted(groups.items())]
    every = [x for rows in groups.values() for x in rows]
    out.append(summarise(MPT_FILE, "all", "tokens/s/GPU", every, target, lower_is_better=False))
    return out
