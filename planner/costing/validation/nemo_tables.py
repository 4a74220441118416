"""NVIDIA's published NeMo / Megatron-Bridge performance tables, 2025 onwards (DGX-B200, DGX-H100).

`nemo_b200.csv` and `nemo_h100_2025.csv` share one layout: the release (NeMo container), the
published row (model, GPUs, precision, GBS, MBS, sequence length, FSDP, TP, PP, CP, VP), the
measured tokens/s per GPU and model TFLOP/s per GPU, and the `source` of each row (page or
repository file, table, retrieval date). Every row is priced as `large_runs` prices
`nemo_h100.csv`: a Megatron-style plan on 8-GPU DGX nodes with 8 × 400 Gb/s per node (DGX H100
and DGX B200 both carry eight 400 Gb/s ConnectX-7), distributed optimizer, sequence parallelism
when tp > 1, interleaving when vp > 1, fp8 GEMMs, executed by `hetplan frameworks`' megatron
record (Megatron-Core with Transformer Engine, which is what NeMo runs).

Counted: rows whose model shape is known. Context-parallel rows are priced with the plan's
cp (the megatron record prices Megatron-Core's overlapped causal ring, `cost_models/context.py`);
FSDP rows (Megatron-FSDP) at ZeRO-3: parameters, gradients and optimizer state sharded over the
data-parallel GPUs, gathers prefetched and gradient reduce-scatters overlapped.
"""

from __future__ import annotations

import csv
from pathlib import Path

from cost_models.catalog import get_gpu
from cost_models.profiles import ProfileSet
from planner.costing.validation.common import FileReport, Row, summarise
from planner.costing.validation.large_runs import MODELS, fused_framework, large_run_row

__all__ = ["NEMO_TABLE_FILES", "nemo_table_reports"]

NEMO_TABLE_FILES = {"nemo_b200.csv": "B200-180GB", "nemo_h100_2025.csv": "H100-SXM5-80GB"}
"""File name -> the catalog GPU of the DGX system its rows were measured on."""

DGX_NIC_GBPS = 3200.0
"""Per node: DGX H100 and DGX B200 datasheets, 8 × 400 Gb/s ConnectX-7 for the compute fabric."""


def _rows(path: Path, gpu_name: str, profiles: ProfileSet) -> list[Row]:
    gpu = get_gpu(gpu_name)
    rows = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            tp, pp, cp, vp, fsdp = (int(r[k]) for k in ("tp", "pp", "cp", "vp", "fsdp"))
            label = (f"{r['release']} {r['model']} {r['gpus']} GPUs tp{tp} pp{pp} cp{cp} vp{vp}"
                     + (" fsdp" if fsdp else ""))
            measured = float(r["tokens_per_s_per_gpu"])
            if r["model"] not in MODELS:
                rows.append(Row(label, measured, None, used=False, note="model shape not known"))
                continue
            # Megatron-FSDP shards parameters, gradients and optimizer state over the
            # data-parallel GPUs (ZeRO-3); otherwise the distributed optimizer (ZeRO-1).
            rows.append(large_run_row(
                label, measured, r["model"], int(r["seq"]), r["precision"], gpu, int(r["gpus"]),
                DGX_NIC_GBPS, tp, pp, vp, int(r["mbs"]), int(r["gbs"]), "none", fsdp > 0,
                profiles, fused_framework, cp=cp, zero=3 if fsdp else 1))
    return rows


def nemo_table_reports(data_dir: Path, profiles: ProfileSet) -> list[FileReport]:
    """One report per table file present in `data_dir` (tokens/s per GPU, higher is better)."""
    out = []
    for name, gpu_name in NEMO_TABLE_FILES.items():
        path = data_dir / name
        if path.exists():
            out.append(summarise(name, "all", "tokens/s/GPU", _rows(path, gpu_name, profiles),
                                 "throughput within 10 %", lower_is_better=False))
    return out
