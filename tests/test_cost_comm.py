"""Collective and p2p times against their closed forms (Thakur et al. 2005; nccl-tests)."""

from __future__ import annotations

import math

import pytest

from cost_models.comm import (
    Link,
    allgather_s,
    allreduce_s,
    p2p_s,
    reduce_scatter_s,
    ring_allreduce_s,
    tree_allreduce_s,
)

LINK = Link(gb_per_s=100.0, latency_s=5e-6)
B = 256e6  # bytes


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
def test_ring_allreduce_matches_closed_form(n: int) -> None:
    expected = 2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * B / 100e9
    assert ring_allreduce_s(B, n, LINK) == pytest.approx(expected, rel=1e-12)


def test_ring_bandwidth_term_approaches_twice_the_buffer() -> None:
    # 2(n-1)/n -> 2: a huge ring moves each byte twice through every participant.
    t = ring_allreduce_s(B, 10_000, Link(100.0, 0.0))
    assert t == pytest.approx(2 * B / 100e9, rel=1e-3)


def test_tree_latency_grows_with_log_n_and_bandwidth_term_is_flat() -> None:
    for n in (2, 8, 1024):
        expected = 2 * math.ceil(math.log2(n)) * 5e-6 + 2 * B / 100e9
        assert tree_allreduce_s(B, n, LINK) == pytest.approx(expected, rel=1e-12)


def test_allreduce_picks_tree_for_small_messages_and_ring_for_large() -> None:
    small, n = 1e3, 512
    assert allreduce_s(small, n, LINK) == tree_allreduce_s(small, n, LINK)
    assert allreduce_s(B, 8, LINK) == ring_allreduce_s(B, 8, LINK)


def test_allgather_and_reduce_scatter_are_half_an_allreduce() -> None:
    n = 8
    expected = (n - 1) * 5e-6 + (n - 1) / n * B / 100e9
    assert allgather_s(B, n, LINK) == pytest.approx(expected)
    assert reduce_scatter_s(B, n, LINK) == pytest.approx(expected)
    assert allgather_s(B, n, LINK) + reduce_scatter_s(B, n, LINK) == pytest.approx(
        ring_allreduce_s(B, n, LINK))


def test_single_peer_and_empty_message_cost_nothing() -> None:
    assert ring_allreduce_s(B, 1, LINK) == 0.0
    assert allgather_s(0.0, 8, LINK) == 0.0
    assert p2p_s(0.0, LINK) == 0.0


def test_p2p_is_alpha_plus_bytes_over_bandwidth() -> None:
    assert p2p_s(1e9, LINK) == pytest.approx(5e-6 + 1e9 / 100e9)


def test_slower_end_governs() -> None:
    a, b = Link(300.0, 2e-6), Link(12.5, 10e-6)
    assert a.slower(b) == Link(12.5, 10e-6)


def test_bad_link_is_refused() -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        Link(0.0, 1e-6)


def test_pipeline_p2p_shares_the_nic_with_the_gpus_in_use() -> None:
    """Two 8-GPU nodes at 100 Gbit/s, 64 MB across: a plan using one GPU per node has the whole
    NIC (α + B / 11.25 GB/s); with all 8 in use each GPU gets an eighth of it."""
    from cost_models.efficiency import LINK_EFFICIENCY
    from planner.costing.links import p2p_time_s
    from tests.test_cost_fixtures import cluster, gpu

    cl = cluster(("a", gpu(), 2, 8, 100.0, None))
    a, b = cl.nodes[0], cl.nodes[1]
    bw = 100 / 8 * LINK_EFFICIENCY["network"] * 1e9
    one = p2p_time_s(64e6, a, 1, b, 5e-6, {a.name: 1, b.name: 1})
    assert one == pytest.approx(5e-6 + 64e6 / bw, rel=1e-12)
    full = p2p_time_s(64e6, a, 1, b, 5e-6, {a.name: 8, b.name: 8})
    assert full == pytest.approx(5e-6 + 64e6 / (bw / 8), rel=1e-12)
    assert p2p_time_s(64e6, a, 1, b, 5e-6) == full  # default: the whole node in use
