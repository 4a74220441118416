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
  chunk is split at its diagonal: the keys before it, all visible (no mask), and the
  diagonal block, causal with as many keys as queries (where both alignments agree), each
  through the CPU flash kernel, merged by their log-sum-exps. Their backwards are the
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


def _spans(ends: tuple[int, ...], n: int) -> list[tuple[int, int, int]]:
    """(first query, keys before the diagonal, diagonal end) of each query chunk of n."""
    return [(j * n, e - n, e) for j, e in enumerate(ends)]


class _PrefixCausalCpu(torch.autograd.Function):
    """Forward and backward over the CPU flash kernel; K/V gradients into one whole buffer."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                ends: tuple[int, ...], scale: float) -> torch.Tensor:
        n = q.shape[2] // len(ends)
        outs, lses = [], []
        for first, past, end in _spans(ends, n):
            qj = q[:, :, first:first + n]
            o, lse = _fwd(qj, k[:, :, past:end], v[:, :, past:end], 0.0, True, scale=scale)
            if past > 0:  # merge the fully visible keys before the diagonal block
                o_p, lse_p = _fwd(qj, k[:, :, :past], v[:, :, :past], 0.0, False, scale=scale)
                total = torch.logaddexp(lse, lse_p)
                o = ((lse - total).exp().unsqueeze(-1) * o
                     + (lse_p - total).exp().unsqueeze(-1) * o_p).to(q.dtype)
                lse = total
            outs.append(o)
            lses.append(lse)
        out, lse = torch.cat(outs, dim=2), torch.cat(lses, dim=2)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ends, ctx.scale = ends, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        n = q.shape[2] // len(ctx.ends)
        grad = grad.contiguous()
        dq = torch.empty_like(q)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        for first, past, end in _spans(ctx.ends, n):
            rows = slice(first, first + n)
            args = (grad[:, :, rows], q[:, :, rows])
            saved = (out[:, :, rows], lse[:, :, rows], 0.0)
            gq, gk, gv = _bwd(*args, k[:, :, past:end], v[:, :, past:end], *saved, True,
                              scale=ctx.scale)
            dk[:, :, past:end] += gk
            dv[:, :, past:end] += gv
            if past > 0:
                gq_p, gk_p, gv_p = _bwd(*args, k[:, :, :past], v[:, :, :past], *saved, False,
                                        scale=ctx.scale)
                gq = gq + gq_p
                dk[:, :, :past] += gk_p
                dv[:, :, :past] += gv_p
            dq[:, :, rows] = gq
        return dq, dk, dv, None, None


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
    return torch.cat([F.scaled_dot_product_attention(
        q[:, :, j * n:(j + 1) * n], k[:, :, :e], v[:, :, :e], dropout_p=dropout_p,
        attn_mask=causal_lower_right(n, e), scale=scale, enable_gqa=gqa)
        for j, e in enumerate(ends)], dim=2)
