"""Expert parallelism: a mixture-of-experts block's routed experts split over an ep-group.

The ep-group of a stage with `ep` > 1 is the same stage (same TP index) of the pipelines
[k·ep, (k+1)·ep) (schema.py). Group rank i runs experts [i·E/ep, (i+1)·E/ep) for the tokens
of every member: the routed token copies (sorted by expert) go out in one all-to-all
(dispatch), each local expert runs once on what it received, and a second all-to-all brings
the outputs home (combine). Both are `dist.all_to_all_single` inside an autograd function
whose backward runs the mirrored all-to-all; gloo implements all_to_all_single on CPU
(checked on torch 2.13). Every rank still holds every expert's weights: a non-local expert
gets a zero gradient here and the data-parallel all-reduce sums the owners' gradients, which
is the full gradient. The memory saving that `ep` buys is priced by the cost model but not
yet realised by this runtime.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from planner.schema import Plan

__all__ = ["ExpertParallel", "all_to_all", "ep_group", "ep_groups"]


def ep_group(plan: Plan, pipeline: int, chunk: int, rank: int) -> tuple[int, ...] | None:
    """The plan ranks of `rank`'s ep-group for chunk `chunk` of `pipeline` (None: ep 1)."""
    st = plan.pipelines[pipeline].stages[chunk]
    ep = st.ep or 1
    if ep == 1:
        return None
    t = st.ranks.index(rank)
    first = pipeline // ep * ep
    return tuple(sorted(plan.pipelines[q].stages[chunk].ranks[t]
                        for q in range(first, first + ep)))


def ep_groups(plan: Plan) -> list[tuple[int, ...]]:
    """Every ep-group of the plan (each rank creates them all, in one order)."""
    out = []
    for p, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            if (st.ep or 1) > 1 and p % st.ep == 0:
                out += [ep_group(plan, p, j, r) for r in st.ranks]
    return sorted(set(g for g in out if g is not None))


class _AllToAll(torch.autograd.Function):
    """Rows of `x` split by `send` go to the group's ranks; `recv` rows come back from each."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, send: list[int], recv: list[int],
                group: dist.ProcessGroup) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        out = x.new_empty((sum(recv), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        out = grad.new_empty((sum(ctx.send), *grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        return out, None, None, None


def all_to_all(x: torch.Tensor, send: list[int], recv: list[int],
               group: dist.ProcessGroup) -> torch.Tensor:
    """Differentiable all-to-all of rows (the backward sends the gradients back)."""
    return _AllToAll.apply(x, send, recv, group)


class ExpertParallel:
    """`MoE.dispatch` over a process group: this rank runs its E/ep experts for the group."""

    def __init__(self, group: dist.ProcessGroup, ep: int) -> None:
        self.group, self.ep = group, ep
        self.index = dist.get_rank(group)

    def __call__(self, moe: Any, xs: torch.Tensor, counts: list[int]) -> torch.Tensor:
        ep, per = self.ep, moe.num_experts // self.ep
        sent = torch.tensor(counts, dtype=torch.long)
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=self.group)  # got[s·per + l]: from s for l
        got_rows = got.view(ep, per).tolist()
        send_splits = [sum(counts[r * per:(r + 1) * per]) for r in range(ep)]
        recv_splits = [sum(row) for row in got_rows]
        recv = all_to_all(xs, send_splits, recv_splits, self.group)
        pieces = recv.split([c for row in got_rows for c in row])
        outs: list[list[torch.Tensor]] = [[None] * per for _ in range(ep)]  # type: ignore[list-item]
        for lo in range(per):
            expert = moe.experts[self.index * per + lo]
            y = expert(torch.cat([pieces[s * per + lo] for s in range(ep)]))
            for s, part in enumerate(y.split([got_rows[s][lo] for s in range(ep)])):
                outs[s][lo] = part
        back = torch.cat([t for row in outs for t in row])
        return all_to_all(back, recv_splits, send_splits, self.group)
