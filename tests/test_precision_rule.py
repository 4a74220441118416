"""One precision rule for the cost model and the runtime: bf16 where the GPU has bf16 tensor
cores, fp16 with dynamic loss scaling elsewhere (V100, T4), decided per stage's GPU type."""

from __future__ import annotations

import pytest
import torch

from cost_models.catalog import all_gpus, get_gpu
from cost_models.compute import matmul_dtype, needs_loss_scaling, training_dtype
from planner.runtime.local import init_world, run_local
from planner.runtime.precision import stage_dtypes, uses_loss_scaling
from planner.runtime.training import runtime_notes
from tests.test_runtime_plans import make_plan, stage


@pytest.mark.parametrize(("gpu", "dtype"), [
    ("V100-SXM2-32GB", "fp16"), ("T4", "fp16"), ("RTX-2080-Ti", "fp16"),  # Volta, Turing
    ("A100-SXM4-80GB", "bf16"), ("L40S", "bf16"), ("H100-SXM5-80GB", "bf16"),
    ("MI250X", "bf16")])
def test_bf16_training_dtype_follows_the_datasheets(gpu: str, dtype: str) -> None:
    # Volta/Turing whitepapers list FP16 tensor cores and no BF16; Ampere onwards list BF16.
    assert training_dtype(get_gpu(gpu), "bf16") == dtype
    assert needs_loss_scaling(get_gpu(gpu), "bf16") == (dtype == "fp16")
    assert training_dtype(get_gpu(gpu), "fp32") == "fp32"
    assert training_dtype(get_gpu(gpu), "fp16") == "fp16"


def test_cost_model_prices_the_dtype_the_runtime_runs_on_every_catalog_gpu() -> None:
    for gpu in all_gpus():
        for precision in ("bf16", "fp16"):
            assert matmul_dtype(gpu, precision) == training_dtype(gpu, precision), gpu.name


def _plan(gpus: list[str], precision: str):
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2])]}],
                     model={"name": "m", "architecture": "gpt", "hidden_size": 64,
                            "num_layers": 4, "num_attention_heads": 4, "vocab_size": 256,
                            "seq_len": 32, "training": {"precision": precision}})
    data = plan.to_dict()
    for st, gpu in zip(data["pipelines"][0]["stages"], gpus, strict=True):
        st["gpu"] = gpu
    return type(plan).from_dict(data)


def test_a_v100_stage_computes_fp16_and_turns_loss_scaling_on_for_the_whole_plan() -> None:
    mixed = _plan(["A100-SXM4-80GB", "V100-SXM2-32GB"], "bf16")
    assert stage_dtypes(mixed) == {0: "bf16", 1: "bf16", 2: "fp16"}
    assert uses_loss_scaling(mixed)
    assert not uses_loss_scaling(_plan(["A100-SXM4-80GB", "H100-SXM5-80GB"], "bf16"))
    assert not uses_loss_scaling(_plan(["T4", "V100-SXM2-32GB"], "fp32"))
    # On CPU the runtime runs fp32 and says so; no autocast, no scaling.
    notes, autocast, scaling = runtime_notes(mixed, torch.device("cpu"), 2)
    assert (autocast, scaling) == (None, False)
    assert notes == ["precision bf16: running fp32 on CPU"]


def _growth_worker(rank: int, world: int, store_dir: str) -> list[tuple[bool, float]]:
    from planner.runtime.scaler import LossScaler

    init_world(store_dir, "pg", rank, world)
    scaler = LossScaler(init_scale=4.0, growth_interval=2)
    out = []
    for g in ([1.0], [1.0], [float("nan")], [1.0], [1.0]):
        out.append((scaler.unscale_or_skip([torch.tensor(g)], torch.device("cpu")),
                    scaler.scale))
    return out


def test_loss_scaler_grows_after_clean_steps_and_halves_on_overflow() -> None:
    # torch.amp.GradScaler's policy: x2 after growth_interval clean steps, /2 and skip on
    # inf/NaN, the clean count restarting after an overflow.
    (steps,) = run_local(_growth_worker, 1)
    assert steps == [(True, 4.0), (True, 8.0), (False, 4.0), (True, 4.0), (True, 8.0)]
