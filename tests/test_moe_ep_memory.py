"""Expert parallelism holds what the cost model prices: each rank of an ep-group keeps only its
E/ep routed experts (weights, gradients, Adam state), expert gradients are summed over the
ranks holding that expert, and a checkpoint saved at ep 2 loads at ep 1.

Figures come from `estimate` (the cost model) and from the one-process reference dryrun
compares with, never from the runtime itself.
"""

from __future__ import annotations

from pathlib import Path

import torch

from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from planner.runtime.dry_run import dryrun
from planner.runtime.local import init_world, run_local
from planner.schema import Plan
from tests.test_runtime_plans import make_plan, priced_on_one_node, stage

GPU = "A100-SXM4-80GB"
GIB = 2**30


def _plan(pipelines: int, ep: int, *, zero1: bool) -> Plan:
    """`pipelines` one-stage replicas of tiny-moe (chain elements 0..5), experts split `ep` ways."""
    spec = load_model_spec("tiny-moe")
    pipes = [{"microbatches": 1, "stages": [{**stage(0, 6, [p]), "ep": ep}]}
             for p in range(pipelines)]
    return make_plan(pipes, zero1=zero1, model=spec.model_dump(mode="json"))


def _held_worker(rank: int, world: int, store_dir: str, plan_dict: dict) -> tuple:
    from planner.runtime.data import synthetic_batch
    from planner.runtime.engine import Runner

    torch.set_num_threads(1)
    init_world(store_dir, "epmem", rank, world)
    spec = load_model_spec("tiny-moe")
    runner = Runner(Plan.from_dict(plan_dict), rank, {r: r for r in range(world)},
                    build_model(spec, device="cpu"), torch.device("cpu"))
    x, y = synthetic_batch(0, world, spec.seq_len, spec.vocab_size)
    runner.train_step(x, y)  # Adam allocates its moments on the first step
    assert runner.zero is not None
    # The GEMM operands among them: every 2-D weight but the embedding's (chain element 0)
    # looked-up table.
    gemm = sum(p.numel() for (e, _), p in runner.params if p.dim() == 2 and e != 0)
    return (sum(p.numel() for _, p in runner.params), runner.zero.state_bytes(),
            sorted(n for (_, n), _ in runner.params if ".experts." in n), gemm)


def test_an_ep_rank_holds_the_priced_params_and_optimizer_state() -> None:
    # DP 4 = two ep-blocks of ep 2, ZeRO-1: a rank holds the dense params and 2 of 4 experts;
    # each expert lives on 2 ranks (one per block), which slice its Adam state in halves.
    plan = _plan(4, 2, zero1=True)
    data, est = priced_on_one_node(plan, GPU)
    held = run_local(_held_worker, 4, plan.to_dict())
    whole = build_model(load_model_spec("tiny-moe"), device="cpu")
    total = sum(p.numel() for p in whole.parameters())
    experts = sum(p.numel() for n, p in whole.named_parameters() if ".experts." in n)
    for row in est.stages:
        numel, state, _, gemm = held[row.pipeline]
        # fp32 weights under bf16 autocast: 4 B per held parameter, and the autocast region's
        # 16-bit copy of each held GEMM weight (2 B); the priced count is dense + experts / ep.
        assert numel == total - experts // 2
        assert round(row.memory.weights_gib * GIB) == 4 * numel + 2 * gemm, row
        # fp32 master slice + two moments, 12 B per element of the rank's ZeRO-1 slices: the
        # dense params over DP 4, the local experts over their 2 holders (zero1_dp / ep).
        # (The memory breakdown's figure: the row's flat `optimizer_gib` divides by DP alone.)
        assert state == round(row.memory.optimizer_gib * GIB), row
    # Group ranks 0 and 1 of each block hold experts {0, 1} and {2, 3}; blocks hold alike.
    names = [set(h[2]) for h in held]
    assert names[0] == names[2] and names[1] == names[3] and not names[0] & names[1]
    assert {n.split(".experts.")[1].split(".")[0] for n in names[0]} == {"0", "1"}


def test_an_ep2_checkpoint_resumes_at_ep1(tmp_path: Path) -> None:
    # ep 2 × DP 4 (ZeRO-1 slices over each expert's 2 holders) saves; DP 2 at ep 1 loads
    # every expert on both ranks. Both runs match the one-process reference on every tensor.
    ck = tmp_path / "ck"
    first = dryrun(_plan(4, 2, zero1=True), steps=2, save_checkpoint=str(ck))
    second = dryrun(_plan(2, 1, zero1=False), steps=1, resume=str(ck))
    for res in (first, second):
        assert res.ok, res
        assert res.max_grad_diff <= 1e-5
        assert res.params_checked == sum(1 for _ in build_model(
            load_model_spec("tiny-moe"), device="meta").parameters())
    assert second.first_step == 2
    # Every expert was written exactly once (one chunk, the whole tensor) by its first holder.
    from torch.distributed.checkpoint import FileSystemReader

    md = FileSystemReader(str(ck / "step-00000002")).read_metadata().state_dict_metadata
    experts = {k: v for k, v in md.items() if ".experts." in k}
    # model + 2 moments × 3 MoE blocks (layers 1..3) × 3 weights × 4 experts
    assert len(experts) == 3 * 3 * 3 * 4
    for name, item in experts.items():
        assert len(item.chunks) == 1 and tuple(item.chunks[0].sizes) == tuple(item.size), name


def test_ep_gradient_clipping_counts_each_expert_once() -> None:
    # Global-norm clipping below the model's norm: each expert's gradient, held by 2 of the 4
    # ranks, must enter the norm once (as clip_grad_norm_ on the one-process model).
    from tests.test_runtime_dist import _check

    _check(_plan(4, 2, zero1=False), "tiny-moe", max_grad_norm=0.1)
