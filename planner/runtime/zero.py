"""ZeRO stage 1: each rank keeps the Adam state (and an fp32 master copy) of a slice of every
parameter it holds, updates that slice, and all-gathers the updated slices.

The slicing is the one the cost model prices (`estimate`: a stage's optimizer state divided
by the number of pipelines), so that a GPU holds optimizer state for params / (tp × n)
elements of each tensor held by n TP groups:
- Every holder at the same TP degree, tensor split over TP (`local` slices): each rank's TP
  shard is cut into n near-equal pieces over its data-parallel peers (the ranks at its TP index).
- Otherwise (holders at different TP degrees, or a tensor every TP rank keeps whole, such as a
  norm weight): the flattened full tensor is cut into n near-equal pieces, one per holder
  group, and each group's piece into as many pieces as the group has ranks. A rank reads its
  piece of the full gradient (a TP all-gather for split tensors) and, after the step, takes
  its own TP shard from the all-gathered full tensor.
Every rank derives the same slices from the plan alone, without talking. A plan with
`shard_fraction`s cuts each tensor over its holder groups in those proportions instead of
evenly (uneven sharding, which FSDP2 cannot express; Cephalo, 2024).

ZeRO stage 2 on the same slices (`reduce_gradients`): instead of all-reducing the step's
gradients, each slice group reduce-scatters them, so a rank keeps only the summed gradient of
its own slice (the master's `.grad`) and frees the parameters' whole gradients. Gradients
accumulate whole over the step's micro-batches and are reduced once, after the last backward:
replicas of different shapes run different micro-batch counts, so there is no common point
to reduce earlier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor

from planner.runtime.grads import SyncRule, full_tensor, local_tensor, settle_grad
from planner.runtime.stage import ParamKey
from planner.schema import Plan

__all__ = ["ShardedOptimizer", "ZeroSlice", "holder_weights", "split_shards", "zero_groups"]


@dataclass(frozen=True)
class ZeroSlice:
    """How one parameter's optimizer state is spread over the ranks that hold it."""

    key: ParamKey
    full: bool
    """True: ranges index the flattened full tensor; False: this rank's TP shard."""
    group: tuple[int, ...]
    """The ranks sharing the state (plan ranks), in all-gather order."""
    ranges: tuple[tuple[int, int], ...]
    """[start, end) of each member's piece, in `group` order."""


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def _weighted(n: int, weights: list[float]) -> list[tuple[int, int]]:
    """n elements cut in proportion to `weights` (cumulative rounding: exact cover)."""
    total, acc, cuts = sum(weights), 0.0, [0]
    for w in weights:
        acc += w
        cuts.append(min(n, round(n * acc / total)))
    cuts[-1] = n
    return list(zip(cuts, cuts[1:], strict=False))


def holder_weights(plan: Plan) -> dict[tuple[int, ...], float] | None:
    """Each device group's share of the sharded state (its pipeline's `shard_fraction`), or
    None for even shards (Cephalo-style uneven sharding: a replica's share follows its memory)."""
    if plan.pipelines[0].shard_fraction is None:
        return None
    return {tuple(st.ranks): f for pipe, f in zip(plan.pipelines, plan.shard_fractions,
                                                  strict=True) for st in pipe.stages}


def _pieces(n: int, holders: tuple[tuple[int, ...], ...],
            weights: dict[tuple[int, ...], float] | None) -> list[tuple[int, int]]:
    if weights is None:
        return _split(n, len(holders))
    return _weighted(n, [weights[g] for g in holders])


def _is_split(p: torch.Tensor) -> bool:
    return isinstance(p, DTensor) and any(pl.is_shard() for pl in p.placements)


def zero_groups(rules: dict[ParamKey, SyncRule]) -> list[tuple[int, ...]]:
    """Groups the sharded optimizer may gather over, beyond the gradient groups (every rank
    computes the same list: `new_group` is collective)."""
    return sorted({tuple(sorted({r for g in rule.holders for r in g}))
                   for rule in rules.values()})


def split_shards(params: list[tuple[ParamKey, torch.nn.Parameter]],
                 rules: dict[ParamKey, SyncRule], rank: int,
                 to_torch: dict[int, int],
                 weights: dict[tuple[int, ...], float] | None = None) -> list[ZeroSlice]:
    """This rank's slice of every parameter it holds (`params` in key order); `weights`: each
    holder group's share (`holder_weights`), even when None."""
    out = []
    for key, p in params:
        rule = rules[key]
        if rule.uniform and _is_split(p):
            group = rule.group_for(rank)  # the ranks at this TP index, one per holder group
            holder_of = {r: i for i, g in enumerate(rule.holders) for r in g}
            parts = _pieces(local_tensor(p).numel(), rule.holders, weights)
            order = sorted(group, key=lambda r: to_torch[r])
            out.append(ZeroSlice(key, False, tuple(order),
                                 tuple(parts[holder_of[r]] for r in order)))
            continue
        numel = p.numel()  # the full tensor's (a DTensor's global size)
        piece: dict[int, tuple[int, int]] = {}
        for (a, b), g in zip(_pieces(numel, rule.holders, weights), rule.holders, strict=True):
            for r, (x, y) in zip(g, _split(b - a, len(g)), strict=True):
                piece[r] = (a + x, a + y)
        order = sorted(piece, key=lambda r: to_torch[r])
        out.append(ZeroSlice(key, True, tuple(order), tuple(piece[r] for r in order)))
    return out


class ShardedOptimizer:
    """The optimizer over this rank's slices; `step` reads the synced gradients of the
    parameters and writes the updated values back into them on every holder."""

    def __init__(self, params: list[tuple[ParamKey, torch.nn.Parameter]],
                 rules: dict[ParamKey, SyncRule], rank: int, to_torch: dict[int, int],
                 groups: dict[tuple[int, ...], dist.ProcessGroup],
                 make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
                 weights: dict[tuple[int, ...], float] | None = None) -> None:
        self.rank, self.to_torch, self.groups = rank, to_torch, groups
        self.params = dict(params)
        self.slices = split_shards(params, rules, rank, to_torch, weights)
        self.masters: list[torch.nn.Parameter] = []
        with torch.no_grad():
            for s in self.slices:
                # A TP collective for split tensors: every TP rank walks the keys in one order.
                src = self._source(s, self.params[s.key])
                a, b = s.ranges[s.group.index(rank)]
                self.masters.append(torch.nn.Parameter(src.reshape(-1)[a:b].clone()))
        self.optimizer = make(self.masters)

    @staticmethod
    def _source(s: ZeroSlice, t: torch.Tensor) -> torch.Tensor:
        return full_tensor(t) if s.full else local_tensor(t)

    def piece(self, i: int, whole: torch.Tensor) -> torch.Tensor:
        """Slice i's elements of `whole`, a full tensor shaped like its parameter (the same on
        every rank: no communication), as this rank's slice indexes them."""
        s = self.slices[i]
        p = self.params[s.key]
        if not s.full and isinstance(p, DTensor):
            whole = distribute_tensor(whole, p.device_mesh, p.placements,
                                      src_data_rank=None).to_local()
        a, b = s.ranges[s.group.index(self.rank)]
        return whole.reshape(-1)[a:b]

    def grad_bytes(self) -> int:
        """Bytes of gradient this rank keeps for its slices after `reduce_gradients`."""
        return sum(m.grad.numel() * m.grad.element_size() for m in self.masters
                   if m.grad is not None)

    def state_bytes(self) -> int:
        """Bytes of optimizer state on this rank: master slices and their Adam moments."""
        total = sum(m.numel() * m.element_size() for m in self.masters)
        mine = {id(m) for m in self.masters}
        for p, state in self.optimizer.state.items():
            if id(p) not in mine:
                continue  # an FSDP2 shard stepped by the same optimizer
            total += sum(t.numel() * t.element_size() for t in state.values()
                         if torch.is_tensor(t) and t.dim() > 0)
        return total

    @torch.no_grad()
    def reduce_gradients(self, tp: int) -> None:
        """ZeRO-2: sum the step's gradients over each slice group by reduce-scatter, keep this
        rank's slice as its master's gradient and free the parameters' gradients. `tp`: this
        rank's TP degree (a whole-tensor slice sums full / tp from every holder rank, as
        `sync_gradients` does across TP degrees)."""
        flat: list[torch.Tensor] = []
        for s in self.slices:  # TP gathers first, in key order, the same on every TP rank
            p = self.params[s.key]
            settle_grad(p)
            g = full_tensor(p.grad) / tp if s.full else local_tensor(p.grad)
            flat.append(g.reshape(-1))
        by_group: dict[tuple[int, ...], list[int]] = {}
        for i, s in enumerate(self.slices):
            by_group.setdefault(s.group, []).append(i)
        for group in sorted(by_group, key=lambda g: sorted(g)):
            idx = by_group[group]
            me = group.index(self.rank)
            rows = [torch.cat([flat[i][slice(*self.slices[i].ranges[j])] for i in idx])
                    for j in range(len(group))]
            if len(group) == 1:
                mine = rows[0].clone()
            else:
                # Pieces may differ in size (uneven fractions): pad each to the widest.
                width = max(r.numel() for r in rows)
                send = torch.zeros(width * len(group), dtype=rows[0].dtype,
                                   device=rows[0].device)
                for j, r in enumerate(rows):
                    send[j * width:j * width + r.numel()] = r
                mine = torch.empty(width, dtype=send.dtype, device=send.device)
                dist.reduce_scatter_single(mine, send, group=self.groups[tuple(sorted(group))])
            off = 0
            for i in idx:
                a, b = self.slices[i].ranges[me]
                self.masters[i].grad = mine[off:off + b - a].clone()
                off += b - a
        del flat
        for s in self.slices:
            self.params[s.key].grad = None

    @torch.no_grad()
    def step(self) -> None:
        for s, m in zip(self.slices, self.masters, strict=True):
            if self.params[s.key].grad is None and m.grad is not None:
                continue  # reduced to this slice already (ZeRO-2)
            a, b = s.ranges[s.group.index(self.rank)]
            m.grad = self._source(s, self.params[s.key].grad).reshape(-1)[a:b].clone()
        self.optimizer.step()
        by_group: dict[tuple[int, ...], list[int]] = {}
        for i, s in enumerate(self.slices):
            by_group.setdefault(s.group, []).append(i)
        # One all-gather per group, groups in one global order (sorted by plan ranks).
        for group in sorted(by_group, key=lambda g: sorted(g)):
            self._gather(group, by_group[group])

    def _gather(self, group: tuple[int, ...], idx: list[int]) -> None:
        if len(group) == 1:
            pieces = [[self.masters[i] for i in idx]]
        else:
            sizes = [sum(b - a for a, b in (self.slices[i].ranges[j] for i in idx))
                     for j in range(len(group))]
            mine = torch.cat([self.masters[i].detach().reshape(-1) for i in idx])
            width = max(sizes)
            padded = torch.zeros(width, dtype=mine.dtype, device=mine.device)
            padded[:mine.numel()] = mine
            out = [torch.empty_like(padded) for _ in group]
            dist.all_gather(out, padded, group=self.groups[tuple(sorted(group))])
            pieces = []
            for j in range(len(group)):
                off, row = 0, []
                for i in idx:
                    a, b = self.slices[i].ranges[j]
                    row.append(out[j][off:off + b - a])
                    off += b - a
                pieces.append(row)
        for k, i in enumerate(idx):
            s = self.slices[i]
            p = self.params[s.key]
            target = local_tensor(p)
            whole = torch.empty(p.numel() if s.full else target.numel(), dtype=target.dtype,
                                device=target.device)
            for j, (a, b) in enumerate(s.ranges):
                whole[a:b] = pieces[j][k]
            if s.full and isinstance(p, DTensor):  # keep this rank's TP shard of the whole
                whole = distribute_tensor(whole.view(p.shape), p.device_mesh, p.placements,
                                          src_data_rank=None).to_local()
            target.copy_(whole.view_as(target))
