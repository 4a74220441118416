"""Fit the per-generation compute constants on public per-layer measurements, and show the fit.

    .venv/bin/python bench/fit_constants.py [DATA_DIR]
    .venv/bin/python bench/fit_constants.py --large GENERATION EFF [EFF ...]

The second form sweeps one generation's 16-bit tensor efficiency over the large-run files
(torchtitan, NeMo, Llama 3, historic) and prints each file's MAPE and ratio range.

Data: sailor_layer_profiles.csv, TP 1 rows only (no communication inside), transformer-block
and head forward and backward times, all micro-batch sizes (fp32: CUDA cores on Volta/Turing,
TF32 tensor cores on Ampere/Hopper), plus amp_layer_profiles.csv TP 1 forward (fp16 tensor
cores, micro-batch 1). For each GPU generation and math unit a grid search picks the GEMM
efficiency and per-kernel cost that minimise the mean squared log error; it prints the fit,
the per-GPU residuals, and the values to put in cost_models/efficiency.py.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models import efficiency  # noqa: E402
from cost_models.catalog import get_gpu  # noqa: E402
from cost_models.compute import matmul_dtype  # noqa: E402
from cost_models.profiles import ProfileSet  # noqa: E402
from planner.costing.framework import Framework  # noqa: E402
from planner.costing.published_stacks import (  # noqa: E402
    AMP_DEEPSPEED_MEGATRON,
    SAILOR_DEEPSPEED,
)
from planner.costing.validation.common import graph_for  # noqa: E402

MODELS = {"OPT-350": "opt-350m", "GPT-Neo-2.7": "gpt-neo-2.7b"}
NONE = ProfileSet()
sc = importlib.import_module("planner.costing.stage_cost")


def samples(data: Path) -> list[tuple[str, str, object, int, int, float, float]]:
    """(unit key, gpu, graph, layer index, micro-batch, measured fwd s, measured bwd s)."""
    out = []
    with (data / "sailor_layer_profiles.csv").open() as fh:
        for r in csv.DictReader(fh):
            if r["tp"] != "1":
                continue
            gpu = get_gpu(r["gpu"])
            graph = graph_for(MODELS[r["model"]], precision="fp32")
            unit = "cuda" if matmul_dtype(gpu, "fp32") == "fp32" else "tf32"
            key = f"{gpu.generation}/{unit}"
            mb = int(r["micro_batch"])
            out.append((key, gpu.name, graph, 1, mb, float(r["xformer_layer_fwd_ms"]) / 1e3,
                        float(r["xformer_layer_bwd_ms"]) / 1e3))
    with (data / "amp_layer_profiles.csv").open() as fh:
        graph = graph_for("gpt2-amp")
        for r in csv.DictReader(fh):
            if r["tp(mp)"] != "1":
                continue
            gpu = get_gpu("T4" if r["gpu"].startswith("T4") else "V100-SXM2-16GB")
            key = f"{gpu.generation}/tensor"
            out.append((key, gpu.name, graph, 1, 1,
                        float(r["transformer_layer_fwd_ms_mean"]) / 1e3, math.nan))
    return out


def _with(old: efficiency.ComputeConstants, unit: str, eff: float,
          ks: float) -> efficiency.ComputeConstants:
    # dataclasses.replace keeps the fields not swept (fp8_eff: rebuilding the record without
    # it priced NeMo's fp8 GEMMs at the swept 16-bit efficiency in `--large` sweeps).
    return dataclasses.replace(
        old, tensor_eff=eff if unit == "tensor" else old.tensor_eff,
        tf32_eff=eff if unit == "tf32" else old.tf32_eff,
        cuda_eff=eff if unit == "cuda" else old.cuda_eff, kernel_s=ks, fitted_on="fit")


def framework_of(graph) -> Framework:
    """The stack each layer profile was measured in: AMP's DeepSpeed-Megatron 1.1.5 (fp16) or
    Sailor's Megatron-DeepSpeed (fp32), both with eager attention over the full s×s scores
    (their records in planner/costing/framework.py), so the fit prices the work they ran."""
    return SAILOR_DEEPSPEED if graph.dtype_bytes == 4 else AMP_DEEPSPEED_MEGATRON


def predict(gpu_name: str, graph, layer: int, mb: int, precision: str) -> tuple[float, float]:
    sc._CACHE.clear()
    c = sc.stage_cost(graph, layer, layer + 1, get_gpu(gpu_name), 1, mb, "none",
                      precision=precision, profiles=NONE, framework=framework_of(graph))
    return c.fwd_s, c.bwd_s


def main() -> None:
    default = Path(__file__).resolve().parents[2] / "shared" / "data"
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    rows = samples(data)
    by_key = defaultdict(list)
    for row in rows:
        by_key[row[0]].append(row)
    effs = [x / 100 for x in range(4, 100, 2)]
    kernels = [x * 1e-6 for x in (5, 10, 15, 20, 30, 40, 60)]
    # One per-kernel cost for all generations (it is the framework's dispatch cost, not the
    # chip's); per generation and math unit, the GEMM efficiency.
    table: dict[float, dict[str, tuple[float, float, int]]] = {}
    for ks in kernels:
        table[ks] = {}
        for key, group in sorted(by_key.items()):
            gen, unit = key.split("/")
            best = None
            for eff in effs:
                efficiency._CONSTANTS[gen] = _with(efficiency.compute_constants(gen), unit, eff, ks)
                err, n = 0.0, 0
                for _, gpu, graph, li, mb, f, b in group:
                    prec = "fp32" if graph.dtype_bytes == 4 else "fp16"
                    pf, pb = predict(gpu, graph, li, mb, prec)
                    for m, p in ((f, pf), (b, pb)):
                        if not math.isnan(m):
                            err += math.log(p / m) ** 2
                            n += 1
                if best is None or err / n < best[0]:
                    best = (err / n, eff, n)
            table[ks][key] = best
    for ks, fits in table.items():
        total = sum(v[0] * v[2] for k, v in fits.items() if "tensor" not in k)
        n = sum(v[2] for k, v in fits.items() if "tensor" not in k)
        line = "  ".join(f"{k} {v[1]:.2f} (rms {math.sqrt(v[0]):.3f})" for k, v in fits.items())
        print(f"kernel {ks * 1e6:4.0f} us: rms {math.sqrt(total / n):.3f} | {line}")

def sweep_large(gen: str, effs: list[float]) -> None:
    from planner.costing.validation.large_runs import large_run_reports

    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    for eff in effs:
        old = efficiency.compute_constants(gen)
        efficiency._CONSTANTS[gen] = _with(old, "tensor", eff, old.kernel_s)
        sc._CACHE.clear()
        out = []
        for r in large_run_reports(data, NONE):
            ratios = [x.predicted / x.measured for x in r.rows if x.used and x.predicted]
            out.append(f"{r.file}: {r.mape_pct:.1f} % [{min(ratios):.2f}, {max(ratios):.2f}]")
        print(f"{gen} {eff:.2f} | " + " | ".join(out))
        efficiency._CONSTANTS[gen] = old


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--large":
        sweep_large(sys.argv[2], [float(x) for x in sys.argv[3:]])
    else:
        main()


def show(key_filter: str, eff: float, ks: float) -> None:
    """Print measured vs predicted for one key at given constants (debug aid)."""
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    for key, gpu, graph, li, mb, f, b in samples(data):
        if key != key_filter:
            continue
        gen, unit = key.split("/")
        old = efficiency.compute_constants(gen)
        efficiency._CONSTANTS[gen] = _with(old, unit, eff, ks)
        prec = "fp32" if graph.dtype_bytes == 4 else "fp16"
        pf, pb = predict(gpu, graph, li, mb, prec)
        print(f"{gpu:16s} {graph.name:14s} mb{mb:3d} fwd {f * 1e3:8.2f} pred {pf * 1e3:8.2f}"
              f"   bwd {b * 1e3:8.2f} pred {pb * 1e3:8.2f}")
