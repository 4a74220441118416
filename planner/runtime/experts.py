"""Expert parallelism: a mixture-of-experts block's routed experts split over an ep-group.

The ep-group of a stage with `ep` > 1 is the same stage (same TP index) of the pipelines
[k·ep, (k+1)·ep) (schema.py). Group rank i (its place among the members' torch ranks, as
`new_group` orders them) runs experts [i·E/ep, (i+1)·E/ep) for the tokens of every member:
the routed token copies (sorted by expert) go out in one all-to-all (dispatch), each local
expert runs once on what it received, and a second all-to-all brings the outputs home
(combine). Both are `dist.all_to_all_single` inside an autograd function whose backward runs
the mirrored all-to-all; gloo implements all_to_all_single on CPU (checked on torch 2.13).

A rank holds only its E/ep experts, as the cost model prices it (stage_cost: params less
expert_params·(1 - 1/ep); expert optimizer state over zero1_dp / ep): the other experts'
modules are replaced by `RemoteExpert` placeholders before the stage is moved to its device,
so their weights, gradients and optimizer state never exist on this rank. Expert j's gradient
(the owner's already covers its whole ep-group's tokens) is summed over the ranks holding
it, one per ep-group (`expert_rules`: the group rank j·ep/E of each ep-block of data-parallel
replicas, and every rank of a replica that runs the block at ep 1), and ZeRO-1 slices its
optimizer state over those same ranks (zero.py reads the rule's holders). Checkpoints save
each expert once under its global name (its first holder group writes), so a run at another
ep (or none) loads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from planner.errors import HetplanError
from planner.runtime.grads import SyncRule
from planner.runtime.stage import ParamKey
from planner.schema import Plan

__all__ = ["ExpertParallel", "RemoteExpert", "all_to_all", "drop_remote_experts", "ep_group",
           "ep_groups", "ep_position", "expert_keys", "expert_rules"]


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


def ep_position(plan: Plan, pipeline: int, chunk: int, rank: int,
                to_torch: dict[int, int]) -> int:
    """`rank`'s group rank in its ep-group (0 at ep 1): torch orders a group's members by
    torch rank, and the all-to-all splits follow that order."""
    members = ep_group(plan, pipeline, chunk, rank)
    if members is None:
        return 0
    return sorted(to_torch[r] for r in members).index(to_torch[rank])


def expert_keys(keys: Iterable[ParamKey]) -> dict[ParamKey, tuple[int, int]]:
    """Parameter key → (expert index, experts in its block) for every routed expert's
    parameter (`...experts.<j>.<name>`, MoE's layout); read from names alone, so every rank
    derives the same answer from the whole model's layout."""
    found: dict[ParamKey, tuple[int, str, int]] = {}
    blocks: dict[tuple[int, str], set[int]] = {}
    for e, name in keys:
        parts = name.split(".")
        for i in range(len(parts) - 2):
            if parts[i] == "experts" and parts[i + 1].isdigit():
                prefix, j = ".".join(parts[:i]), int(parts[i + 1])
                found[(e, name)] = (e, prefix, j)
                blocks.setdefault((e, prefix), set()).add(j)
                break
    return {k: (j, len(blocks[(e, prefix)])) for k, (e, prefix, j) in found.items()}


def expert_rules(plan: Plan, elements: dict[ParamKey, tuple[int, ...]],
                 to_torch: dict[int, int]) -> dict[ParamKey, SyncRule]:
    """The sync rule of every routed expert's parameter: held only by the TP groups whose ep
    position owns the expert (every group of a stage at ep 1)."""
    out = {}
    for key, (j, n) in expert_keys(elements).items():
        holders = set()
        for e in elements[key]:
            for p, pipe in enumerate(plan.pipelines):
                for c, st in enumerate(pipe.stages):
                    if not st.layers[0] <= e < st.layers[1]:
                        continue
                    ep = st.ep or 1
                    if n % ep:
                        raise HetplanError(f"pipelines.{p}.stages.{c}: ep {ep} does not "
                                           f"divide {n} experts")
                    where = {ep_position(plan, p, c, r, to_torch) for r in st.ranks}
                    if len(where) > 1:
                        raise HetplanError(f"pipelines.{p}.stages.{c}: its TP ranks sit at "
                                           "different places in their ep-groups (torch rank "
                                           "order); number the replicas' ranks alike")
                    if where.pop() == j * ep // n:
                        holders.add(tuple(st.ranks))
        out[key] = SyncRule(tuple(sorted(holders)))
    return out


class RemoteExpert(nn.Module):
    """Stands in for an expert another rank of the ep-group holds (no parameters)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a remote expert ran locally: its tokens go through the all-to-all")


def drop_remote_experts(moe: Any, index: int, ep: int) -> None:
    """Keep group rank `index`'s experts of `moe`; placeholders for the rest."""
    per = moe.num_experts // ep
    for i in range(moe.num_experts):
        if i // per != index:
            moe.experts[i] = RemoteExpert()


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
