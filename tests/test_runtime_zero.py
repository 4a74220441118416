"""ZeRO-1 in the runtime: optimizer state sliced as the cost model prices it, mixed TP included.

A rank keeps Adam state for params / (tp × pipelines) elements of every tensor it holds, also
where pipelines hold a tensor at different TP degrees (the flattened full tensor is cut per
pipeline, then per TP rank). Checked two ways: training matches the one-process reference,
and each rank's allocated optimizer bytes equal `estimate`'s optimizer bytes for its stage.
"""

from __future__ import annotations

import torch

from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from planner.runtime.local import init_world, run_local
from planner.schema import Plan
from tests.test_runtime_dist import _check
from tests.test_runtime_plans import make_plan, priced_on_one_node, stage

GPU = "A100-SXM4-80GB"
# Pipeline 0: TP 2 (ranks 0, 1) then TP 1 (rank 2); pipeline 1: TP 1 then TP 2. Every tensor is
# held at two different TP degrees, so no DP peers hold matching shards.
_PIPES = [
    {"microbatches": 2, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2])]},
    {"microbatches": 2, "stages": [stage(0, 2, [3]), stage(2, 6, [4, 5])]},
]


def test_zero1_mixed_tp_pipelines_match_reference() -> None:
    # 3 steps: steps 2 and 3 run on weights all-gathered from the optimizer slices. Then a
    # tied GPT: the embedding/head weight is held by four TP groups of degrees 2, 1, 1, 2.
    _check(make_plan(_PIPES, zero1=True), "tiny-llama", steps=3)
    _check(make_plan(_PIPES, zero1=True), "tiny", steps=3)


def _bytes_worker(rank: int, world: int, store_dir: str,
                  plan_dict: dict) -> tuple[int, int]:
    from planner.runtime.data import synthetic_batch
    from planner.runtime.engine import Runner

    init_world(store_dir, "zero", rank, world)
    spec = load_model_spec("tiny-llama")
    runner = Runner(Plan.from_dict(plan_dict), rank, {r: r for r in range(world)},
                    build_model(spec, device="cpu"), torch.device("cpu"))
    x, y = synthetic_batch(0, 4, spec.seq_len, spec.vocab_size)
    runner.train_step(x, y)  # Adam allocates its moments on the first step
    assert runner.zero is not None
    from planner.runtime.grads import local_tensor

    # Elements of the head's (and embedding's) tensors every TP rank keeps whole (its final
    # norm): the estimate prices their state whole per TP rank, the runtime slices it.
    whole = sum(p.numel() for k, p in runner.params
                if runner.view.chunks[0].tp > 1 and local_tensor(p) is p
                and k[0] in (0, spec.num_layers + 1))
    return runner.zero.state_bytes(), whole


def test_zero1_optimizer_bytes_equal_the_estimate_on_mixed_tp() -> None:
    spec = load_model_spec("tiny-llama")
    plan = make_plan(_PIPES, zero1=True, model=spec.model_dump(mode="json"))
    data, est = priced_on_one_node(plan, GPU)
    allocated = run_local(_bytes_worker, 6, plan.to_dict())
    # fp32 master slice + two Adam moments = 12 B per element, the 12 B/param the cost model
    # shards under ZeRO-1 in mixed precision; every tiny-llama tensor divides by tp × 2.
    # The head's final norm is priced whole on each TP rank (planner/costing/vocab_cost.py)
    # while ZeRO here slices its state over the TP ranks too: (1 - 1/tp) of its 12 B per
    # element, over the 2 pipelines, more in the estimate.
    for row in est.stages:
        ranks = data["pipelines"][row.pipeline]["stages"][row.stage]["ranks"]
        for r in ranks:
            state, whole = allocated[r]
            assert (state + 12 * whole * (1 - 1 / row.tp) / 2
                    == round(row.optimizer_gib * 2**30)), (row, r)
    # Over all ranks, each parameter's state is kept exactly once (both pipelines hold it all).
    total_params = sum(p.numel() for p in build_model(spec, device="cpu").parameters())
    assert sum(state for state, _ in allocated) == 12 * total_params
