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

__all__ = ["Attention", "AttentionImpl", "CoreAttention", "apply_rope"]

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
                allowed: torch.Tensor | None = None) -> torch.Tensor:
        """`allowed`: (queries, keys) mask of the keys each query sees, boolean or additive
        (0 / -inf in q's dtype), for queries and keys that are not one contiguous causal
        sequence (context parallelism); None: causal over the same positions."""
        p = self.dropout if self.training else 0.0
        gqa = q.shape[1] != k.shape[1]
        if self.impl == "sdpa":
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=p, is_causal=allowed is None,
                enable_gqa=gqa
            )
        if gqa:
            group = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        s = q.shape[-2]
        # An additive mask: adding saves nothing for backward (masked_fill would save the mask).
        if allowed is None:
            mask = torch.full((s, s), float("-inf"), device=q.device, dtype=q.dtype).triu(1)
        elif allowed.dtype != torch.bool:
            mask = allowed
        else:
            mask = torch.zeros(allowed.shape, device=q.device, dtype=q.dtype).masked_fill(
                ~allowed, float("-inf"))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + mask
        probs = F.softmax(scores, dim=-1)
        probs = dropout(probs, p, self.training)
        return torch.matmul(probs, v)


def apply_rope(x: torch.Tensor, theta: float,
               positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotary position embedding (rotate-half layout) on (batch, heads, seq, head_dim), at
    `positions` along the sequence (default 0 .. seq-1)."""
    s, d = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    if positions is None:
        positions = torch.arange(s, device=x.device)
    angles = torch.outer(positions.to(device=x.device, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
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
        q = self.q(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        ctx = self.context
        pos = None if ctx is None else ctx.positions(s, x.device)
        if self.rope_theta is not None:
            q, k = apply_rope(q, self.rope_theta, pos), apply_rope(k, self.rope_theta, pos)
        if ctx is None:
            out = self.core(q, k, v)
        else:  # every key of the sequence, gathered from the cp group; causal by position
            out = self.core(q, ctx.gather(k), ctx.gather(v), ctx.mask(s, x.device, q.dtype))
        return self.o(out.transpose(1, 2).reshape(b, s, -1))
