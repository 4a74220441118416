"""Pipeline p2p as hetplan's runtime runs it: every receiving TP rank gets the whole boundary
activation (planner/runtime/topology.py), so its price is counted from the runtime's own
peer functions, not from the 1/tp scatter-gather that Megatron-style stacks run."""

from __future__ import annotations

import dataclasses

import pytest

from cost_models.efficiency import LINK_EFFICIENCY
from cost_models.profiles import ProfileSet
from planner.costing import DEFAULT_FRAMEWORK, estimate, megatron_plan
from planner.costing.links import intra_link, p2p_time_s
from planner.runtime.topology import Chunk, backward_peers, forward_peers
from tests.test_cost_fixtures import cluster, gpt_graph, gpu

NONE = ProfileSet()
WHOLE_B = 64e6


def _busiest_sends(tp_src: int, tp_dst: int) -> tuple[int, int]:
    """Whole tensors the busiest GPU sends, (forward, backward), counted from the runtime."""
    src = Chunk(0, 0, (0, 1), tuple(range(tp_src)), "none")
    dst = Chunk(0, 1, (1, 2), tuple(range(tp_src, tp_src + tp_dst)), "none")
    fwd = [len(forward_peers(src, dst, r)) for r in src.ranks]
    bwd = [len(backward_peers(src, dst, r)) for r in dst.ranks]
    # Every receiver reads exactly one whole tensor from one peer, both directions.
    assert all(len(forward_peers(src, dst, r)) == 1 for r in dst.ranks)
    assert all(len(backward_peers(src, dst, r)) == 1 for r in src.ranks)
    assert sum(fwd) == tp_dst and sum(bwd) == tp_src
    return max(fwd), max(bwd)


@pytest.mark.parametrize(("tp_src", "tp_dst"), [(1, 1), (2, 2), (4, 4), (8, 8), (2, 1),
                                                (1, 2), (4, 2), (2, 4), (8, 2), (3, 2)])
def test_priced_bytes_are_what_the_runtime_sends(tp_src: int, tp_dst: int) -> None:
    """Across nodes and inside one: the mean of the busiest GPU's forward and backward bytes
    (the schedule pays one `send_s` each way), at that GPU's link."""
    cl = cluster(("a", gpu(), 2, 8, 100.0, None))
    a, b = cl.nodes[0], cl.nodes[1]
    fwd, bwd = _busiest_sends(tp_src, tp_dst)
    sent = WHOLE_B * (fwd + bwd) / 2
    nic_bps = 100 / 8 * LINK_EFFICIENCY["network"] * 1e9 / 8  # 8 GPUs in use share the NIC
    across = p2p_time_s(WHOLE_B, a, tp_src, b, 5e-6, dst_tp=tp_dst, scatter_gather=False)
    assert across == pytest.approx(5e-6 + sent / nic_bps, rel=1e-12)
    link = intra_link(a)
    inside = p2p_time_s(WHOLE_B, a, tp_src, a, 5e-6, dst_tp=tp_dst, scatter_gather=False)
    assert inside == pytest.approx(link.latency_s + sent / link.bytes_per_s, rel=1e-12)
    old = p2p_time_s(WHOLE_B, a, tp_src, b, 5e-6)  # Megatron's 1/tp per rank
    assert old == pytest.approx(5e-6 + WHOLE_B / tp_src / nic_bps, rel=1e-12)
    if tp_src > 1 or tp_dst > 1:
        assert across > old  # the scatter-gather price under-prices hetplan's runtime


def test_estimate_prices_the_whole_boundary_for_hetplan_only() -> None:
    """tp 2 × pp 2 over two 2-GPU nodes: hetplan's record pays the whole tensor per TP rank
    (more time than the scatter-gather price); at tp 1 the two agree exactly."""
    graph = gpt_graph(layers=4)
    cl = cluster(("a", gpu(), 2, 2, 10.0, None))
    split = dataclasses.replace(DEFAULT_FRAMEWORK, p2p_scatter_gather=True)
    plan = megatron_plan(graph, cl, tp=2, pp=2, dp=1, micro_batch=1, global_batch=8)
    whole = estimate(graph, cl, plan, profiles=NONE).iteration_time_s
    assert whole > estimate(graph, cl, plan, profiles=NONE, framework=split).iteration_time_s
    plan1 = megatron_plan(graph, cl, tp=1, pp=2, dp=1, micro_batch=1, global_batch=8)
    assert (estimate(graph, cl, plan1, profiles=NONE).iteration_time_s
            == estimate(graph, cl, plan1, profiles=NONE, framework=split).iteration_time_s)
