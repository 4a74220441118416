"""Causal self-attention with separate q/k/v/o projections (so TP can shard each).

The attention core (softmax(q·kᵀ/√d)·v) is its own parameter-free module: the extractor
finds it to apply selective-recompute and flash-kernel memory rules, and the runtime
could checkpoint it alone.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from planner.models.ops import dropout
from planner.models.prefix_attention import prefix_causal_attention

__all__ = ["Attention", "AttentionImpl", "CoreAttention"]

AttentionImpl = Literal["sdpa", "math"]


class CoreAttention(nn.Module):
    """Causal softmax(q·kᵀ/√d)·v over (batch, heads, seq, head_dim) tensors.

    `sdpa` is what training uses (F.scaled_dot_product_attention, which picks a fused
    kernel on GPUs). `math` spells the same computation out op by op with an additive
    mask, so the bytes autograd saves are those Korthikanti et al. itemise (Table 2).
    """

    def __init__(self, impl: AttentionImpl = "sdpa", dropout: float = 0.0) -> None:
        super().__init__()
        if impl not in ("sdpa", "math"):
            raise ValueError(f"attention impl must be 'sdpa' or 'math', got {impl!r}")
        self.impl = impl
        self.dropout = dropout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                ends: tuple[int, ...] | None = None) -> torch.Tensor:
        """`ends`: the queries are len(ends) equal chunks, chunk j the last positions before
        key ends[j], causal aligned to the bottom right (context parallelism's zig-zag
        chunks against the gathered K/V, `prefix_attention.py`); None: queries and keys are
        the same positions."""
        p = self.dropout if self.training else 0.0
        gqa = q.shape[1] != k.shape[1]
        if self.impl == "sdpa":
            if ends is not None:
                return prefix_causal_attention(q, k, v, ends, p)
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True,
                                                  enable_gqa=gqa)
        if gqa:
            group = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        if ends is None:
            ends = (k.shape[-2],)
        n = q.shape[-2] // len(ends)
        outs = []
        for j, end in enumerate(ends):
            # An additive mask (adding saves nothing for backward; masked_fill would save
            # the mask): the op-by-op reference, which computes every score of its keys.
            mask = torch.full((n, end), float("-inf"), device=q.device, dtype=q.dtype
                              ).triu(end - n + 1)
            whole = len(ends) == 1 and end == k.shape[-2]
            qj, kj, vj = (q, k, v) if whole else (
                q[:, :, j * n:(j + 1) * n], k[:, :, :end], v[:, :, :end])
            scores = torch.matmul(qj, kj.transpose(-2, -1)) * (
                1.0 / math.sqrt(q.shape[-1])) + mask
            probs = dropout(F.softmax(scores, dim=-1), p, self.training)
            outs.append(torch.matmul(probs, vj))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


def _rope_tables(x: torch.Tensor, s: int, theta: float,
                 positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (seq, head_dim / 2) at `x`'s dtype."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    if positions is None:
        positions = torch.arange(s, device=x.device)
    angles = torch.outer(positions.to(device=x.device, dtype=torch.float32), inv_freq)
    return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        *,
        bias: bool,
        rope_theta: float | None,
        impl: AttentionImpl = "sdpa",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.head_dim = hidden_size // num_heads
        kv_size = num_kv_heads * self.head_dim
        self.q = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.k = nn.Linear(hidden_size, kv_size, bias=bias)
        self.v = nn.Linear(hidden_size, kv_size, bias=bias)
        self.o = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.rope_theta = rope_theta
        self.core = CoreAttention(impl, dropout)
        self.context: Any = None
        """Context parallelism (set by the runtime, `planner/runtime/context.py`): this
        rank's token positions and the K/V all-gather over its cp group; None: whole
        sequences."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # Head counts come from the actual (possibly TP-sharded) projection outputs.
        q = self.q(x).view(b, s, -1, self.head_dim)
        k = self.k(x).view(b, s, -1, self.head_dim)
        v = self.v(x).view(b, s, -1, self.head_dim)
        ctx = self.context
        pos = None if ctx is None else ctx.positions(s, x.device)
        if self.rope_theta is not None:
            # Rotated in the projections' (batch, seq, heads, head_dim) layout, so q reaches
            # the attention kernel as a transposed view like k and v, and the kernel's output,
            # laid out like q (CPU flash; CUDA flash allocates it `empty_like` q), is already
            # the o-projection's (batch, seq, hidden) input: no copy for autograd to keep
            # beside the kernel's own saved output.
            # One table per tensor, on purpose: sharing q's table with k would let autograd
            # save it once, which the extractor measures as less activation memory (a cost
            # model change, left for whoever owns the activation figures).
            cos, sin = _rope_tables(q, s, self.rope_theta, pos)
            q = _rotate(q, cos.unsqueeze(1), sin.unsqueeze(1))
            cos, sin = _rope_tables(k, s, self.rope_theta, pos)
            k = _rotate(k, cos.unsqueeze(1), sin.unsqueeze(1))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if ctx is None:
            out = self.core(q, k, v)
        else:  # the sequence's keys gathered from the cp group, in position order: each of
            # this rank's query chunks attends to the prefix up to its own end
            out = self.core(q, ctx.gather(k), ctx.gather(v), ctx.ends(s))
        return self.o(out.transpose(1, 2).reshape(b, s, -1))
