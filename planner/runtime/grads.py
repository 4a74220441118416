"""Gradient sync across pipelines (data parallelism) and across tied copies.

Each step's loss is the mean over all micro-batches of all pipelines, so every micro-batch's
loss is already scaled by 1 / (total micro-batches): a pipeline's gradient carries its batch
share, and the global gradient is the plain SUM over the pipelines that hold a parameter
(plus, for a tied embedding, over the stage holding the embedding and the one holding the head).

Who holds a parameter: one TP group per pipeline (two for a tied weight split across stages).
- Every holder group has the same TP degree: each TP rank all-reduces its local shard with
  the ranks at the same TP index in the other groups (Megatron's DP all-reduce).
- TP degrees differ (heterogeneous pipelines): shards do not line up, so each rank gathers the
  full gradient in its TP group, contributes full / tp to an all-reduce over every holder
  rank (the tp copies of a group add up to one), and keeps its own slice of the sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor

from planner.runtime.stage import ParamKey
from planner.runtime.topology import element_holders
from planner.schema import Plan

__all__ = ["SyncRule", "clip_grad_norm", "full_tensor", "local_tensor", "settle_grad",
           "sync_gradients", "sync_rules"]


@dataclass(frozen=True)
class SyncRule:
    """How one parameter's gradient is reduced."""

    holders: tuple[tuple[int, ...], ...]
    """The TP groups holding the parameter (over all pipelines and tied copies), sorted."""

    # Cached: sync_gradients asks for every parameter on every step.
    @cached_property
    def uniform(self) -> bool:
        return len({len(g) for g in self.holders}) == 1

    @cached_property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Every all-reduce group this rule can use (on any rank)."""
        if self.uniform:
            return tuple(tuple(sorted(g[i] for g in self.holders))
                         for i in range(len(self.holders[0])))
        return (tuple(sorted({r for g in self.holders for r in g})),)

    def group_for(self, rank: int) -> tuple[int, ...]:
        for g in self.groups:
            if rank in g:
                return g
        raise ValueError(f"rank {rank} does not hold this parameter")


def sync_rules(plan: Plan, elements: dict[ParamKey, tuple[int, ...]]) -> dict[ParamKey, SyncRule]:
    out = {}
    for key, elems in elements.items():
        holders = sorted({g for e in elems for g in element_holders(plan, e)})
        out[key] = SyncRule(tuple(holders))
    return out


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a TP collective for a DTensor); a plain tensor as it is."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (a view); a plain tensor as it is."""
    return t.to_local() if isinstance(t, DTensor) else t


def settle_grad(p: torch.nn.Parameter) -> None:
    """Give `p` a gradient laid out like `p` (zeros where backward left none)."""
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    elif isinstance(p, DTensor) and p.grad.placements != p.placements:
        # A token table on DTensor's own lookup (one vocab_embed.py cannot run: max_norm,
        # ...) gets its gradient back replicated (torch's sharding rule for the embedding
        # backward); keep this rank's rows like the weight's, so shards line up across
        # holders and the optimizer sees matching layouts.
        p.grad = p.grad.redistribute(p.device_mesh, p.placements)


def sync_gradients(params: list[tuple[ParamKey, torch.nn.Parameter]],
                   rules: dict[ParamKey, SyncRule], rank: int, tp: int,
                   groups: dict[tuple[int, ...], dist.ProcessGroup]) -> None:
    """Reduce this rank's gradients in place. `params` in key order, the same on a TP group."""
    buckets: dict[tuple[int, ...], list[tuple[torch.nn.Parameter, torch.Tensor, bool]]] = {}
    for key, p in params:
        settle_grad(p)
        rule = rules[key]
        group = rule.group_for(rank)
        if len(group) == 1:
            continue
        # The gather (a TP collective) runs here, in the same order on every TP rank.
        flat = local_tensor(p.grad) if rule.uniform else full_tensor(p.grad) / tp
        buckets.setdefault(group, []).append((p, flat, rule.uniform))
    # One all-reduce per group, groups in one global order, so no two ranks wait crosswise.
    for group in sorted(buckets):
        items = buckets[group]
        flat = torch.cat([t.reshape(-1) for _, t, _ in items])
        dist.all_reduce(flat, group=groups[group])
        offset = 0
        for p, t, uniform in items:
            piece = flat[offset:offset + t.numel()].view_as(t)
            offset += t.numel()
            if not isinstance(p.grad, DTensor):
                p.grad.copy_(piece)
            elif uniform:
                p.grad.to_local().copy_(piece)
            else:
                p.grad = distribute_tensor(piece, p.grad.device_mesh, p.grad.placements,
                                           src_data_rank=None)


@torch.no_grad()
def clip_grad_norm(params: list[tuple[ParamKey, torch.nn.Parameter]],
                   rules: dict[ParamKey, SyncRule], rank: int, tp_index: int,
                   max_norm: float, device: torch.device,
                   fsdp: frozenset[ParamKey] = frozenset(),
                   slices: tuple[torch.Tensor, ...] = ()) -> float:
    """Clip by the global norm of the model's gradient (after sync); returns the norm.

    Every parameter counts once: only its first holder group adds it, with each TP rank
    adding its shard of a sharded tensor and TP rank 0 alone adding a replicated one. An
    FSDP2 gradient (`fsdp` keys, sharded over the replicas) counts its shard on every replica,
    on every TP rank when TP splits it too. `slices`: ZeRO-2 gradient slices (`zero.py`), which
    partition every gradient over its holders, so each counts once as it is; parameters whose
    gradient was freed for them (None) are skipped.
    """
    total = torch.zeros((), dtype=torch.float64, device=device)
    for t in slices:
        total += t.double().pow(2).sum()
    for key, p in params:
        g = p.grad
        if g is None:
            continue
        if key in fsdp:
            if g is not None and (tp_index == 0 or any(pl.is_shard() for pl in g.placements[1:])):
                total += local_tensor(g).double().pow(2).sum()
            continue
        if rank not in rules[key].holders[0]:
            continue
        sharded = isinstance(g, DTensor) and any(pl.is_shard() for pl in g.placements)
        if sharded or tp_index == 0:
            total += local_tensor(g).double().pow(2).sum()
    dist.all_reduce(total)
    norm = float(total.sqrt())
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for t in slices:
            t.mul_(coef)
        for _, p in params:
            if p.grad is not None:
                local_tensor(p.grad).mul_(coef)
    return norm
