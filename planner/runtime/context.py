"""Context parallelism: each sequence split over the pipelines of a cp-block.

The cp group of a stage with `cp` > 1 is the same stage (same TP index) of the pipelines
[k·cp, (k+1)·cp) (schema.py); pipeline k·cp + i holds chunks i and 2·cp-1-i of the 2·cp
equal chunks of every sequence (zig-zag, so causal attention work is even). Attention
all-gathers K and V over the group, in position order, and each query chunk attends causally
to the keys up to its own end (models/prefix_attention.py: no position mask, only the
causal part computed): the Llama 3 variant
(Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.2), which gloo runs on CPU;
torch 2.13's `torch.distributed.tensor.experimental.context_parallel` has no sharding rule
for the CPU attention kernel (`_scaled_dot_product_flash_attention_for_cpu`). The gather's
backward sums every rank's gradient for the gathered K/V and keeps this rank's block.
Gradients of the weights are then summed over dp·cp by the usual data-parallel all-reduce:
each cp rank's loss is its tokens' mean scaled by 1/(cp · micro-batches) (topology.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from planner.schema import Plan

__all__ = ["ContextShard", "cp_group", "cp_groups", "shard_sequence", "zigzag_positions"]


def zigzag_positions(local_len: int, cp: int, index: int,
                     device: torch.device | None = None) -> torch.Tensor:
    """Positions, in the whole sequence of local_len · cp tokens, of cp rank `index`'s tokens:
    chunks index and 2·cp-1-index of 2·cp."""
    half = local_len // 2
    return torch.cat((torch.arange(index * half, (index + 1) * half, device=device),
                      torch.arange((2 * cp - 1 - index) * half, (2 * cp - index) * half,
                                   device=device)))


def shard_sequence(x: torch.Tensor, cp: int, index: int) -> torch.Tensor:
    """The tokens of (batch, seq) `x` that cp rank `index` holds."""
    return x[:, zigzag_positions(x.shape[1] // cp, cp, index, x.device)]


def cp_group(plan: Plan, pipeline: int, chunk: int, rank: int) -> tuple[int, ...] | None:
    """The plan ranks of `rank`'s cp group for chunk `chunk` of `pipeline` (None: cp 1)."""
    cp = plan.cp(pipeline)
    if cp == 1:
        return None
    t = plan.pipelines[pipeline].stages[chunk].ranks.index(rank)
    first = pipeline // cp * cp
    return tuple(sorted(plan.pipelines[q].stages[chunk].ranks[t]
                        for q in range(first, first + cp)))


def cp_groups(plan: Plan) -> list[tuple[int, ...]]:
    """Every cp group of the plan (each rank creates them all, in one order)."""
    out = []
    for p, pipe in enumerate(plan.pipelines):
        if plan.cp(p) > 1 and p % plan.cp(p) == 0:
            out += [cp_group(plan, p, j, r) for j, st in enumerate(pipe.stages)
                    for r in st.ranks]
    return sorted(set(g for g in out if g is not None))


class _Gather(torch.autograd.Function):
    """(b, heads, seq/cp, d) blocks of the group → the whole (b, heads, seq, d), in position
    order (each block is its rank's two zig-zag chunks)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shard: ContextShard) -> torch.Tensor:
        ctx.shard = shard
        cp, half = shard.cp, x.shape[2] // 2
        parts = [torch.empty_like(x) for _ in range(cp)]
        dist.all_gather(parts, x.contiguous(), group=shard.group)
        # Chunk c < cp is the first half of cp rank c's block, chunk c >= cp the second half
        # of cp rank 2·cp-1-c's.
        return torch.cat([parts[shard.order[c]].narrow(2, 0, half) for c in range(cp)]
                         + [parts[shard.order[c]].narrow(2, half, half)
                            for c in reversed(range(cp))], dim=2)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        shard = ctx.shard
        total = grad.contiguous().clone()
        dist.all_reduce(total, group=shard.group)
        half = total.shape[2] // (2 * shard.cp)
        first, last = shard.index, 2 * shard.cp - 1 - shard.index
        return torch.cat((total.narrow(2, first * half, half),
                          total.narrow(2, last * half, half)), dim=2), None


class ContextShard:
    """This rank's place in a cp group: its token positions, the K/V gather, the key prefix
    each of its two query chunks sees."""

    def __init__(self, group: dist.ProcessGroup, cp: int, index: int) -> None:
        self.group, self.cp, self.index = group, cp, index
        # Group ranks follow torch rank order, not cp order: learn which holds which index.
        mine = torch.tensor([index])
        every = [torch.empty_like(mine) for _ in range(cp)]
        dist.all_gather(every, mine, group=group)
        where = {int(t): g for g, t in enumerate(every)}
        self.order = [where[i] for i in range(cp)]

    def positions(self, local_len: int, device: torch.device) -> torch.Tensor:
        return zigzag_positions(local_len, self.cp, self.index, device)

    def ends(self, local_len: int) -> tuple[int, int]:
        """Where this rank's two query chunks end in the sequence (chunks index and
        2·cp-1-index of local_len / 2 tokens): each attends, causally, to the gathered keys
        before that end, so no mask is built and the keys after it are never computed on."""
        half = local_len // 2
        return (self.index + 1) * half, (2 * self.cp - self.index) * half

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return _Gather.apply(x, self)
