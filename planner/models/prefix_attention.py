"""Causal attention of query chunks against a key prefix, bottom-right aligned, no mask.

Context parallelism (runtime/context.py) gives a rank 2 zig-zag chunks of queries and the
whole sequence's K/V in position order: query chunk j ends at key position ends[j], so it
sees keys [0, ends[j]) under a causal mask aligned to the bottom right (its last query sees
every key). Only that causal part is computed, and no queries × keys mask is built:

- CUDA and other devices: `F.scaled_dot_product_attention` with
  `torch.nn.attention.bias.causal_lower_right`, which torch 2.13 dispatches to the flash or
  memory-efficient kernel (lower-right causal natively) when they accept the inputs.
- CPU: torch 2.13 has no lower-right CPU kernel (`causal_lower_right` falls back to
  materialising the L × S mask, and the CPU flash kernel saves it for the backward). So each
  chunk's keys are split into blocks: the diagonal block, causal with as many keys as
  queries (where both alignments agree), and the keys before it, all visible (no mask),
  each block through the CPU flash kernel, merged by their log-sum-exps. Their backwards are the
  kernel's own, given the merged output and log-sum-exp (a block's share of the softmax
  gradient needs only those: Dao, "FlashAttention-2", 2023, Algorithm 2; the merge is the
  ring attention one, Liu et al. 2023).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

__all__ = ["prefix_causal_attention"]

_fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _blocks(end: int, n: int) -> list[tuple[int, int, bool]]:
    """Key blocks (first, end, causal) of a query chunk of n ending at key `end`: the
    diagonal block, causal, then the fully visible keys before it in blocks of at most n
    (so the backward holds one block's K/V gradient at a time beside the whole ones)."""
    return [(end - n, end, True)] + [(a, min(a + n, end - n), False)
                                     for a in range(0, end - n, n)]


class _PrefixCausalCpu(torch.autograd.Function):
    """Forward and backward over the CPU flash kernel; K/V gradients into one whole buffer."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                ends: tuple[int, ...], scale: float) -> torch.Tensor:
        n = q.shape[2] // len(ends)
        acc = torch.promote_types(q.dtype, torch.float32)  # merge bf16 blocks in fp32
        outs, lses = [], []
        for j, end in enumerate(ends):
            qj = q[:, :, j * n:(j + 1) * n]
            o = lse = None
            for a, b, causal in _blocks(end, n):
                o_b, lse_b = _fwd(qj, k[:, :, a:b], v[:, :, a:b], 0.0, causal, scale=scale)
                if o is None or lse is None:
                    o, lse = o_b.to(acc), lse_b
                    continue
                total = torch.logaddexp(lse, lse_b)  # softmax over both blocks' keys
                o = ((lse - total).exp().unsqueeze(-1) * o
                     + (lse_b - total).exp().unsqueeze(-1) * o_b.to(acc))
                lse = total
            assert o is not None
            outs.append(o.to(q.dtype))
            lses.append(lse)
        out, lse = _seq_major_cat(outs), torch.cat(lses, dim=2)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ends, ctx.scale = ends, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        n = q.shape[2] // len(ctx.ends)
        grad = grad.contiguous()
        dq = torch.zeros_like(q)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        for j, end in enumerate(ctx.ends):
            rows = slice(j * n, (j + 1) * n)
            for a, b, causal in _blocks(end, n):
                # Each block's share of the gradient from the merged output and log-sum-exp.
                gq, gk, gv = _bwd(grad[:, :, rows], q[:, :, rows], k[:, :, a:b],
                                  v[:, :, a:b], out[:, :, rows], lse[:, :, rows], 0.0,
                                  causal, scale=ctx.scale)
                dq[:, :, rows] += gq
                dk[:, :, a:b] += gk
                dv[:, :, a:b] += gv
        return dq, dk, dv, None, None


def _seq_major_cat(outs: list[torch.Tensor]) -> torch.Tensor:
    """The chunks' (batch, heads, queries, head_dim) outputs joined along the queries in a
    (batch, queries, heads, head_dim) buffer: the attention module's transpose and reshape to
    the o-projection's input is then a view, not a copy autograd would keep beside this one
    (models/attention.py)."""
    return torch.cat([o.transpose(1, 2) for o in outs], dim=1).transpose(1, 2)


def prefix_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            ends: tuple[int, ...], dropout_p: float = 0.0) -> torch.Tensor:
    """(batch, heads, queries, head_dim) `q` in len(ends) equal chunks; (batch, kv heads,
    keys, head_dim) `k`, `v` in position order (GQA when the head counts differ). Chunk j's
    queries are the ends[j] - chunk length .. ends[j] - 1 positions: each sees the keys up to
    its own position."""
    n = q.shape[2] // len(ends)
    if len(ends) * n != q.shape[2] or any(e < n or e > k.shape[2] for e in ends):
        raise ValueError(f"query chunks of {n} cannot end at keys {ends} of {k.shape[2]}")
    scale = 1.0 / math.sqrt(q.shape[-1])
    if q.device.type == "cpu" and dropout_p == 0.0:
        return _PrefixCausalCpu.apply(q, k, v, tuple(ends), scale)
    gqa = q.shape[1] != k.shape[1]
    return _seq_major_cat([F.scaled_dot_product_attention(
        q[:, :, j * n:(j + 1) * n], k[:, :, :e], v[:, :, :e], dropout_p=dropout_p,
        attn_mask=causal_lower_right(n, e), scale=scale, enable_gqa=gqa)
        for j, e in enumerate(ends)])
