"""MoE + sequence parallelism on hetplan's runtime: runtime/seqpar.py all-reduces the experts'
row-parallel outputs over TP and slices back to the sequence shard (its backward all-gathers
the slice's gradient), where Megatron-SP reduce-scatters. The estimate prices that: one
ring all-gather more each way for an MoE block, nothing more for a dense block or for the
other frameworks' stacks, nothing without SP."""

from __future__ import annotations

import dataclasses

import pytest

import planner
from cost_models.catalog import get_gpu
from cost_models.comm import Link
from cost_models.profiles import ProfileSet
from planner.costing.framework import HETPLAN_RUNTIME, MEGATRON_CORE
from planner.costing.layer_cost import layer_costs

_LINK = Link(gb_per_s=100.0, latency_s=5e-6)
_TP, _MB = 2, 2


def _fwd_bwd(layer, graph, fw, sp: bool) -> tuple[float, float]:
    out = layer_costs(layer, graph, get_gpu("A100-SXM4-80GB"), _TP, _MB, "none", "bf16", sp,
                      _LINK, ProfileSet(), fw)
    return out[0], out[1]


@pytest.fixture(scope="module")
def graph():
    return planner.load_model("tiny-moe").graph


def test_an_moe_block_under_sp_pays_one_all_gather_more_each_way(graph) -> None:
    moe = next(layer for layer in graph.layers if layer.num_experts)
    other = dataclasses.replace(HETPLAN_RUNTIME, name="reduce-scatter-stack")
    f_h, b_h = _fwd_bwd(moe, graph, HETPLAN_RUNTIME, True)
    f_o, b_o = _fwd_bwd(moe, graph, other, True)
    # Ring all-gather of the branch's mb × (s·h bytes) output over TP (closed form):
    # (t - 1)·alpha + (t - 1)/t · B / bandwidth.
    nbytes = _MB * moe.tp_allreduce_bytes
    gather_s = (_TP - 1) * 5e-6 + (_TP - 1) / _TP * nbytes / 100e9
    assert f_h - f_o == pytest.approx(gather_s, rel=1e-9)
    assert b_h - b_o == pytest.approx(gather_s, rel=1e-9)


def test_dense_blocks_no_sp_and_other_frameworks_are_unchanged(graph) -> None:
    dense = next(layer for layer in graph.layers if layer.kind == "block" and not
                 layer.num_experts)
    moe = next(layer for layer in graph.layers if layer.num_experts)
    other = dataclasses.replace(HETPLAN_RUNTIME, name="reduce-scatter-stack")
    assert _fwd_bwd(dense, graph, HETPLAN_RUNTIME, True) == _fwd_bwd(dense, graph, other, True)
    assert _fwd_bwd(moe, graph, HETPLAN_RUNTIME, False) == _fwd_bwd(moe, graph, other, False)
    megatron_as_other = dataclasses.replace(MEGATRON_CORE, name="other")
    assert (_fwd_bwd(moe, graph, MEGATRON_CORE, True)
            == _fwd_bwd(moe, graph, megatron_as_other, True))
