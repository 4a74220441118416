"""A GPU's routed expert GEMMs at expert parallelism ep: each of its E/ep experts runs once on
the rows routed to it from all ep members' micro-batches (planner/runtime/experts.py), so its
GEMMs have ep × the rows they have at ep 1 (M = tokens·k·ep/E) and are priced by that shape
(`cost_models.gemm_shape`). Before, every ep was priced with ep 1's M = tokens·k/E."""

from __future__ import annotations

from typing import Any

import pytest

import planner
import planner.costing.layer_gemms as lg
from cost_models.catalog import get_gpu
from cost_models.gemm_shape import GemmShape
from planner.costing.layer_gemms import layer_gemm_factors


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_expert_gemm_rows_grow_with_ep(monkeypatch: pytest.MonkeyPatch, ep: int) -> None:
    graph = planner.load_model("tiny-moe").graph
    layer = next(layer for layer in graph.layers if layer.num_experts)
    seen: list[Any] = []
    real = lg.shape_factor

    def spy(shapes: Any, **kw: Any) -> float:
        seen.append(tuple(shapes))
        return real(shapes, **kw)

    monkeypatch.setattr(lg, "shape_factor", spy)
    lg._factors.cache_clear()
    mb = 3
    layer_gemm_factors(layer, graph.seq_len, get_gpu("A100-SXM4-80GB"), "bf16", 2, mb, ep=ep)
    # tiny-moe: hidden 64, 4 experts, top-2, moe_ffn 96 split over TP 2 → 48 per GPU: w1, w3
    # (64 → 48) and w2 (48 → 64) forward, their transposes for the activation gradient.
    rows = mb * graph.seq_len * 2 * ep // 4
    assert (GemmShape(rows, 48, 64), GemmShape(rows, 48, 64), GemmShape(rows, 64, 48)) in seen
    assert (GemmShape(rows, 64, 48), GemmShape(rows, 64, 48), GemmShape(rows, 48, 64)) in seen
