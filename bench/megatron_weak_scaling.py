"""Out-of-sample check: Megatron-LM's weak-scaling table (Narayanan et al., SC'21, Table 1),
which is not in ../shared/data, against `estimate`.

    .venv/bin/python bench/megatron_weak_scaling.py [--overlap]

The table gives model shape, TP, PP, GPU count, global batch and achieved TFLOP/s per GPU
(Megatron's formula 96·B·s·l·h²(1 + s/6h + V/16lh), which counts the recomputed forward) for
GPT models of 1.7 B to 1 T parameters on DGX A100 80GB (Selene: 8 × 200 Gb/s HDR per node),
fp16, sequence 2048, vocabulary 51,200, full activation recomputation. It does not give the
micro-batch size, so both 1 and 2 are printed; the schedule is taken as plain 1F1B. Because
of those two assumptions the rows are a probe, not part of `hetplan validate`.

`--overlap` re-runs the rows with a different launch model (host dispatch hidden behind GPU
work: a layer pass costs max(GPU time + 3 µs per kernel, 20 µs per kernel) instead of GPU
time + 20 µs per kernel), the probe docs/cost-model.md §7 reports.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cost_models.compute as compute  # noqa: E402
from cost_models.catalog import get_gpu  # noqa: E402
from cost_models.profiles import ProfileSet  # noqa: E402
from planner.costing.published_stacks import MEGATRON_EAGER  # noqa: E402
from planner.costing.validation import large_runs  # noqa: E402

# Narayanan et al. 2021, Table 1: (billions of parameters, heads, hidden, layers, TP, PP,
# GPUs, global batch, achieved TFLOP/s per GPU). Each row's aggregate PFLOP/s in the paper
# equals TFLOP/s × GPUs, and 12·l·h² plus the embeddings gives its parameter count.
TABLE_1 = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137.0),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138.0),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142.0),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135.0),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138.0),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140.0),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148.0),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155.0),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163.0),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163.0),
)
NIC_GBPS_PER_NODE = 1600.0  # DGX A100: 8 × 200 Gb/s HDR InfiniBand (NVIDIA DGX A100 datasheet)


def _overlapped(work: compute.LayerWork, gpu, precision: str) -> tuple[float, float, float]:
    gap_s, dispatch_s = 3e-6, 20e-6
    n = work.kernels_fwd

    def one(gemm: float, mem: float) -> float:
        return max(gemm + mem + n * gap_s, n * dispatch_s)

    w, (sf, sa, sw) = work.gemm_width, work.gemm_scale
    return (one(compute.gemm_s(work.fwd_matmul_flops, gpu, precision, w, sf),
                compute.memory_s(work.fwd_memory_bytes, gpu)),
            one(compute.gemm_s(work.bwd_act_matmul_flops, gpu, precision, w, sa),
                compute.memory_s(2 * work.fwd_memory_bytes, gpu)),
            one(compute.gemm_s(work.bwd_weight_matmul_flops, gpu, precision, w, sw), 0.0))


def main() -> None:
    if "--overlap" in sys.argv[1:]:
        # The package re-exports a function named stage_cost: fetch the module itself.
        importlib.import_module("planner.costing.stage_cost").layer_compute_s = _overlapped
    a100 = get_gpu("A100-SXM4-80GB")
    for mb in (1, 2):
        errors = []
        print(f"micro-batch {mb}:")
        for params_b, heads, h, layers, tp, pp, gpus, gbs, measured in TABLE_1:
            name = f"megatron-{params_b}b"
            large_runs.MODELS[name] = {**large_runs._GPT, "name": name, "hidden_size": h,
                                       "num_layers": layers, "num_attention_heads": heads,
                                       "vocab_size": 51200}
            _, tflops, feasible, _ = large_runs._run(
                name, 2048, "fp16", a100, gpus, NIC_GBPS_PER_NODE, tp, pp, 1, mb, gbs, "full",
                False, ProfileSet(), lambda m, g: MEGATRON_EAGER, count_recompute=True,
                overlap_dp=False)
            err = 100 * (tflops / measured - 1)
            errors.append(abs(err))
            print(f"  {params_b:7.1f} B  tp{tp} pp{pp:<2d} {gpus:5d} GPUs  measured "
                  f"{measured:5.1f}  predicted {tflops:5.1f} TFLOP/s  {err:+6.1f} %"
                  f"{'' if feasible else '  (we predict OOM)'}")
        print(f"  MAPE {sum(errors) / len(errors):.1f} %")


if __name__ == "__main__":
    main()
