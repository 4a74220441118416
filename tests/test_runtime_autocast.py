"""16-bit training in the runtime: what autocast and FSDP2 keep for the backward, measured.

The runtime trains 16-bit plans under `torch.autocast` over fp32 weights. Each GEMM saves the
16-bit cast of its weight for the backward; autocast's cast cache lives as long as its region,
so the runtime runs a whole step in one region: one copy of each GEMM weight for every
micro-batch (a region per forward kept one per micro-batch in flight). FSDP2 stages gather
their GEMM weights in 16 bits instead (`MixedPrecisionPolicy`), so after ZeRO-3's reshard no
16-bit weight outlives its layer. Measured with saved-tensor hooks at the step's first
backward, against the closed form (2 B × the elements of every GEMM weight on the rank)."""

from __future__ import annotations

from typing import Any

import torch

from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from planner.runtime.data import synthetic_batch
from planner.runtime.engine import Runner
from planner.runtime.grads import full_tensor, local_tensor
from planner.runtime.local import init_world, run_local
from planner.schema import Plan
from tests.test_runtime_fsdp import _plan
from tests.test_runtime_plans import make_plan, stage

MODEL = "tiny-llama"


def _gemm_weight_elements(runner: Runner) -> int:
    """Elements this rank holds of weights a GEMM uses (2-D Linear weights; not norms, not an
    untied token table)."""
    return sum(local_tensor(m.weight).numel() for ch in runner.chunks
               for e in ch.elements for m in e.modules()
               if isinstance(m, torch.nn.Linear))


def _held_worker(rank: int, world: int, store_dir: str, plan_dict: dict,
                 steps: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    init_world(store_dir, "autocast", rank, world)
    torch.manual_seed(0)
    spec = load_model_spec(MODEL)
    runner = Runner(Plan.from_dict(plan_dict), rank, {r: r for r in range(world)},
                    build_model(spec, device="cpu"), torch.device("cpu"),
                    autocast=torch.bfloat16)
    saved: dict[int, torch.Tensor] = {}
    peak: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dtype == torch.bfloat16 and t.dim() == 2:
            saved[id(t)] = t
        return t

    run_backward = runner._backward

    def first_backward(*args: Any) -> None:
        if not peak:  # every forward in flight has saved its tensors by now
            # A copy equals a weight's 16-bit cast (or its transpose, what mm saves); an
            # activation may share a weight's shape but not its values.
            # FSDP2's and TP's weights are DTensors: their local shard and the whole tensor (a
            # collective every rank runs here, in one order).
            casts = [w.detach().to(torch.bfloat16) for _, p in runner.params
                     for w in (local_tensor(p), full_tensor(p))]
            live = {}
            for t in saved.values():
                v = local_tensor(t)
                if v.untyped_storage().nbytes() and any(
                        c.shape == u.shape and torch.equal(c, u)
                        for c in casts for u in (v, v.t())):
                    live[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()
            peak.append(sum(live.values()))
        run_backward(*args)

    runner._backward = first_backward  # type: ignore[method-assign]
    x, y = synthetic_batch(0, 4, spec.seq_len, spec.vocab_size)
    losses = []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for _ in range(steps):
            losses.append(runner.train_step(x, y))
            saved.clear()
    return {"copies_bytes": peak[0], "gemm_elements": _gemm_weight_elements(runner),
            "losses": losses}


def test_one_copy_of_each_gemm_weight_per_step_not_per_micro_batch() -> None:
    # One rank, one stage, 4 micro-batches in flight at the first backward (GPipe order).
    plan = make_plan([{"microbatches": 4, "stages": [stage(0, 6, [0])]}], schedule="gpipe")
    out = run_local(_held_worker, 1, plan.to_dict(), 1)[0]
    # A cast of each GEMM weight per forward would hold 4 copies (the bug this pins).
    assert out["copies_bytes"] == 2 * out["gemm_elements"]


def test_fsdp2_zero3_keeps_no_weight_copy_and_trains_as_zero1() -> None:
    # Two identical single-stage replicas, 2 micro-batches each: FSDP2 ZeRO-3 (16-bit
    # gathers, resharded after each forward) against the same plan on ZeRO-1's slices.
    pipes = [{"microbatches": 2, "stages": [stage(0, 6, [p])]} for p in range(2)]
    zero3 = run_local(_held_worker, 2, _plan(pipes, 3).to_dict(), 2)
    zero1 = run_local(_held_worker, 2, _plan(pipes, 1).to_dict(), 2)
    # Resharded 16-bit weights have freed storage: nothing weight-shaped outlives its layer.
    assert [r["copies_bytes"] for r in zero3] == [0, 0]
    assert [r["copies_bytes"] == 2 * r["gemm_elements"] for r in zero1] == [True, True]
    # Same GEMM inputs in 16 bits, gradients reduced and stepped in fp32: the losses of two
    # steps agree to fp32 summation-order noise.
    for a, b in zip(zero3[0]["losses"], zero1[0]["losses"], strict=True):
        assert abs(a - b) <= 1e-5 * abs(b), (a, b)


def test_tp_weights_are_cached_once_too() -> None:
    # TP 2 (DTensor weights): the cache keys on the parameter, a DTensor leaf, alike.
    plan = make_plan([{"microbatches": 3, "stages": [stage(0, 6, [0, 1])]}], schedule="gpipe")
    out = run_local(_held_worker, 2, plan.to_dict(), 1)
    assert [r["copies_bytes"] == 2 * r["gemm_elements"] for r in out] == [True, True]


def test_full_recompute_reuses_the_step_copy_and_trains_alike() -> None:
    # A recomputed block re-runs its forward inside the backward (autocast off around it, the
    # checkpoint restoring the forward's autocast state): it casts nothing new, and two steps
    # give the losses of the run that keeps its activations.
    plans = [make_plan([{"microbatches": 2, "stages": [stage(0, 6, [0], recompute)]}])
             for recompute in ("full", "none")]
    full, none = (run_local(_held_worker, 1, p.to_dict(), 2)[0] for p in plans)
    # At the first backward only the never-recomputed LM head has saved its cast weight.
    spec = load_model_spec(MODEL)
    assert full["copies_bytes"] == 2 * spec.vocab_size * spec.hidden_size
    assert none["copies_bytes"] == 2 * none["gemm_elements"]
    assert full["losses"] == none["losses"]
