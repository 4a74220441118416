"""Context parallelism's mask-free attention (models/prefix_attention.py): each zig-zag query
chunk against the gathered keys before its end, checked against attention with the explicit
position mask (key position <= query position) the runtime used to build, forward and
backward, for every cp rank of cp 4, with grouped-query heads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import planner.graph  # noqa: F401  (planner.models imports through planner.graph)
from planner.models.attention import CoreAttention
from planner.models.prefix_attention import prefix_causal_attention
from planner.runtime.context import ContextShard, zigzag_positions

SEQ, CP, HALF = 64, 4, 8  # 2·cp chunks of 8 tokens; a rank holds 16


def _ends(index: int) -> tuple[int, int]:
    shard = ContextShard.__new__(ContextShard)
    shard.cp, shard.index = CP, index
    return shard.ends(SEQ // CP)


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    q = torch.randn(2, 4, SEQ // CP, 16, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 2, SEQ, 16, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, SEQ, 16, dtype=dtype, requires_grad=True)
    return q, k, v


def _reference(q, k, v, index: int) -> torch.Tensor:
    pos = zigzag_positions(SEQ // CP, CP, index)
    allowed = torch.arange(SEQ)[None, :] <= pos[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)


@pytest.mark.parametrize("index", range(CP))
@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_prefix_attention_matches_the_position_mask(index: int, impl: str) -> None:
    q, k, v = _inputs(torch.float64)
    assert _ends(index) == ((index + 1) * HALF, (2 * CP - index) * HALF)
    ref = _reference(q, k, v, index)
    out = CoreAttention(impl)(q, k, v, _ends(index))  # type: ignore[arg-type]
    grad = torch.randn_like(ref)
    want = torch.autograd.grad(ref, (q, k, v), grad)
    got = torch.autograd.grad(out, (q, k, v), grad)
    assert (out - ref).abs().max() < 1e-12
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max() < 1e-12
    # Keys after the rank's last query get no gradient: they were never computed on.
    last = _ends(index)[1]
    assert not got[1][:, :, last:].any() and not got[2][:, :, last:].any()


def test_prefix_attention_on_cpu_saves_no_queries_by_keys_tensor() -> None:
    # torch 2.13's `causal_lower_right` on CPU would materialise the mask and the CPU flash
    # kernel would save it: here only q, K, V, output and log-sum-exp are saved.
    q, k, v = _inputs(torch.float32)
    shapes = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        prefix_causal_attention(q, k, v, _ends(1))
    assert sorted(shapes) == sorted([tuple(q.shape), tuple(k.shape), tuple(v.shape),
                                     tuple(q.shape), (2, 4, SEQ // CP)])


def test_bad_chunk_ends_are_one_clear_error() -> None:
    q, k, v = _inputs(torch.float32)
    with pytest.raises(ValueError, match="cannot end"):
        prefix_causal_attention(q, k, v, (4, 8))
