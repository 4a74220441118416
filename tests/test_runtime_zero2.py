"""ZeRO-2 on the runtime's own slices (zero.py), where FSDP2's even shards cannot go: replicas
of different shapes and TP degrees, uneven `shard_fraction`s, tied weights. After the backward
each slice group reduce-scatters the gradients, so a rank keeps the summed gradient of its
slice alone. Checked two ways: training against the one-process reference (gradient slices
every step, weights after the last), and each rank's held gradient and optimizer bytes after
the step against `estimate`'s memory parts for its stage. The gradients are reduced once per
step (the replicas run different micro-batch counts), so during the backward they are still
whole: the peak is ZeRO-1's, which the runner's note says and the search respects.
"""

from __future__ import annotations

from typing import Any

import torch

from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from planner.runtime.local import init_world, run_local
from planner.schema import Plan
from tests.test_runtime_dist import TOL, _check
from tests.test_runtime_plans import make_plan, priced_on_one_node, stage

GPU = "A100-SXM4-80GB"
# Pipeline 0: TP 2 then TP 1; pipeline 1: TP 1 then TP 2, cut at another layer. Every tensor
# is held at two TP degrees, so the slices index whole tensors (a TP gather first).
_MIXED = [
    {"microbatches": 3, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2])]},
    {"microbatches": 1, "stages": [stage(0, 2, [3]), stage(2, 6, [4, 5])]},
]


def _plan(pipes: list[dict[str, Any]], zero: int, fractions: tuple[float, ...] | None = None,
          model: dict | None = None) -> Plan:
    data = make_plan(pipes, zero1=True, model=model).to_dict()
    data["zero"] = zero
    for p, f in zip(data["pipelines"], fractions or (), strict=False):
        p["shard_fraction"] = f
    return Plan.from_dict(data)


def test_zero2_mixed_tp_uneven_fractions_match_reference() -> None:
    # Uneven 0.75 / 0.25 slices over mixed TP, gradients clipped to a global norm below the
    # model's (the norm is summed over the slices): llama (untied) and GPT (its tied
    # embedding/head held by four TP groups of degrees 2, 1, 1, 2). Each run prints its
    # measured differences (pytest -s) for docs/runtime.md.
    res = _check(_plan(_MIXED, 2, (0.75, 0.25)), "tiny-llama", max_grad_norm=0.1)
    print("zero2 tiny-llama", res.max_grad_diff, res.max_param_diff, res.max_loss_diff)
    assert res.max_param_diff <= TOL, res
    # The fp16 loss-scaling path too (a power-of-two scale is exact in fp32): the slices are
    # unscaled after the reduce-scatter.
    res = _check(_plan(_MIXED, 2, (0.25, 0.75)), "tiny", loss_scale=1024.0)
    print("zero2 tiny", res.max_grad_diff, res.max_param_diff, res.max_loss_diff)
    assert res.max_param_diff <= TOL, res


def _held_worker(rank: int, world: int, store_dir: str, plan_dict: dict) -> dict[str, Any]:
    from planner.runtime.data import synthetic_batch
    from planner.runtime.engine import Runner

    torch.set_num_threads(1)
    init_world(store_dir, "zero2", rank, world)
    spec = load_model_spec("tiny-llama")
    runner = Runner(Plan.from_dict(plan_dict), rank, {r: r for r in range(world)},
                    build_model(spec, device="cpu"), torch.device("cpu"))
    x, y = synthetic_batch(0, 4, spec.seq_len, spec.vocab_size)
    assert runner.zero is not None
    from planner.runtime.grads import local_tensor

    # The gradients held at the peak: just before the slices' reduce-scatter (end of backward),
    # and the token table's alone (its local elements; none where this rank lacks it).
    peak: list[int] = []
    table: list[int] = []
    reduce = runner.zero.reduce_gradients

    def recorded(tp: int) -> None:
        peak.append(sum(local_tensor(p.grad).numel() for _, p in runner.params
                        if p.grad is not None))
        table.extend(local_tensor(p.grad).numel() for k, p in runner.params
                     if k == (0, "tok.weight") and p.grad is not None)
        reduce(tp)

    runner.zero.reduce_gradients = recorded  # type: ignore[method-assign]
    runner.train_step(x, y)  # Adam allocates its moments on the first step

    whole = sum(p.grad.numel() for _, p in runner.params if p.grad is not None)
    return {"grad_bytes": runner.zero.grad_bytes(), "state_bytes": runner.zero.state_bytes(),
            "peak_grad_elements": peak[0], "table_grad_elements": table,
            "whole_grad_elements": whole,
            "notes": runner.notes,
            "weight_elements": sum(local_tensor(p).numel() for _, p in runner.params),
            # Elements of the GEMM weights this rank holds: a 16-bit plan's autocast keeps one
            # 16-bit copy of each per step (tests/test_runtime_autocast.py measures it).
            "gemm_elements": sum(local_tensor(m.weight).numel() for ch in runner.chunks
                                 for e in ch.elements for m in e.modules()
                                 if isinstance(m, torch.nn.Linear)),
            # Whole over TP > 1 in a block (its norms): the estimate divides those by TP; the
            # head's final norm it prices whole (planner/costing/vocab_cost.py).
            "replicated_elements": sum(p.numel() for k, p in runner.params
                                       if runner.view.chunks[0].tp > 1 and local_tensor(p) is p
                                       and 0 < k[0] <= spec.num_layers),
            "whole_vocab_layer_elements": sum(
                p.numel() for k, p in runner.params
                if runner.view.chunks[0].tp > 1 and local_tensor(p) is p
                and k[0] in (0, spec.num_layers + 1))}


def test_zero2_held_gradient_and_state_bytes_equal_the_estimate() -> None:
    spec = load_model_spec("tiny-llama")
    fractions = (0.75, 0.25)
    plan = _plan(_MIXED, 2, fractions, model=spec.model_dump(mode="json"))
    data, est = priced_on_one_node(plan, GPU)
    held = run_local(_held_worker, 6, plan.to_dict())
    # The estimate prices hetplan's runtime as it trains a bf16 plan: fp32 weights and
    # gradients (4 B each), 12 B of fp32 master and Adam moments per sliced element, and one
    # 16-bit copy of each GEMM weight (autocast; this fp32 dryrun does not cast, so the copy
    # is added from the rank's own GEMM weights).
    for row in est.stages:
        ranks = data["pipelines"][row.pipeline]["stages"][row.stage]["ranks"]
        for r in ranks:
            assert held[r]["whole_grad_elements"] == 0, (row, r)  # every whole gradient freed
            # Through the backward every gradient is whole: the peak the runtime holds is what
            # estimate prices for these stages (ZeRO-1's gradients, zero_runs.py), with the
            # same TP simplification as the weights below.
            whole = (held[r]["peak_grad_elements"]
                     - held[r]["replicated_elements"] * (1 - 1 / row.tp))
            assert 4 * whole == row.memory.gradients_gib * 2**30, (row, r)
            # The vocab-split token table's gradient is held as this rank's rows alone
            # (vocab / TP × hidden: 128 × 64 at TP 2), not whole (256 × 64) as DTensor's
            # embedding backward computed it before vocab_embed.py.
            rows = spec.vocab_size // row.tp if row.layers[0] == 0 else None
            assert held[r]["table_grad_elements"] == ([rows * spec.hidden_size] if rows else [])
            # The head's final norm is whole on every TP rank and priced so; under ZeRO the
            # runtime slices its Adam state over the TP ranks too (zero.py), which the
            # estimate does not (12 B per element, the pipeline's share, (1 - 1/TP) of it).
            whole_state = (12 * held[r]["whole_vocab_layer_elements"]
                           * fractions[row.pipeline] * (1 - 1 / row.tp))
            assert (held[r]["state_bytes"] + whole_state
                    == round(row.memory.optimizer_gib * 2**30)), (row, r)
            # Weights stay whole at ZeRO-2. The estimate divides a block's weights by TP; its
            # norm weights are kept whole on each TP rank (a known simplification of the cost
            # model; the head's final norm is priced whole).
            kept = held[r]["weight_elements"] - held[r]["replicated_elements"] * (1 - 1 / row.tp)
            assert (4 * kept + 2 * held[r]["gemm_elements"]
                    == row.memory.weights_gib * 2**30), (row, r)
    # The runner says why its peak is ZeRO-1's: the whole gradients live through the backward.
    assert all(len(h["notes"]) == 1 and "held whole through the backward" in h["notes"][0]
               for h in held)
    # Over all ranks each gradient element is kept exactly once; pipeline 0 keeps 3/4 of it.
    total_params = sum(p.numel() for p in build_model(spec, device="cpu").parameters())
    assert sum(h["grad_bytes"] for h in held) == 4 * total_params
    assert sum(held[r]["grad_bytes"] for r in (0, 1, 2)) == 3 * total_params
