"""Pareto front of (cost, throughput): constructed cases and a brute-force oracle."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from planner.report.pareto import draw_pareto, pareto_front


def _dominated(i: int, costs, tps) -> bool:
    return any(costs[j] is not None and costs[j] <= costs[i] and tps[j] >= tps[i]
               and (costs[j] < costs[i] or tps[j] > tps[i]) for j in range(len(costs)))


def test_constructed_cases() -> None:
    # cheap-slow, mid, dear-fast are a front; one point is slower and dearer than mid.
    assert pareto_front([1.0, 5.0, 9.0, 6.0], [10.0, 50.0, 90.0, 40.0]) == [0, 1, 2]
    # Same cost, lower throughput: dominated. Same throughput, higher cost: dominated.
    assert pareto_front([2.0, 2.0, 3.0], [20.0, 10.0, 20.0]) == [0]
    # Exact duplicates dominate neither each other: both stay.
    assert pareto_front([2.0, 2.0, 1.0], [20.0, 20.0, 5.0]) == [2, 0, 1]
    # One point beats all others on both axes.
    assert pareto_front([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == [0]
    # Unknown price: never on the front, even when fastest.
    assert pareto_front([None, 4.0], [1e9, 1.0]) == [1]
    assert pareto_front([], []) == []


@pytest.mark.parametrize("seed", range(30))
def test_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    costs = [None if rng.random() < 0.1 else float(rng.randint(1, 8)) for _ in range(n)]
    tps = [float(rng.randint(1, 8)) for _ in range(n)]
    expected = {i for i in range(n) if costs[i] is not None and not _dominated(i, costs, tps)}
    front = pareto_front(costs, tps)
    assert set(front) == expected
    assert [costs[i] for i in front] == sorted(costs[i] for i in front)


def test_plot_places_cost_per_token_and_notes_what_is_missing() -> None:
    from planner.report.pareto import pareto_figure

    fig = pareto_figure(["a", "b", "c"], [0.5, 0.25, None], [5.0, 9.0, 3.0],
                        usd_per_hour=[2.0, 4.0, None], infeasible=["d"])
    ax = fig.axes[0]
    assert "per 1M tokens" in ax.get_xlabel()
    # b is cheaper per token and faster: alone on the front, a dominated.
    front = ax.get_lines()[0]
    assert list(front.get_xdata()) == [0.25] and list(front.get_ydata()) == [9.0]
    assert [list(p) for p in ax.collections[0].get_offsets()] == [[0.5, 5.0]]
    texts = [t.get_text() for t in ax.texts]
    assert "b ($4.00/h)" in texts
    assert "no price: c\nno feasible plan: d" in texts


def test_plot_is_written(tmp_path: Path) -> None:
    out = draw_pareto(["a", "b", "c"], [1.0, 2.0, None], [5.0, 9.0, 3.0], tmp_path / "p.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 15_000
    svg = draw_pareto(["a", "b"], [1.0, 2.0], [5.0, 9.0], tmp_path / "p.svg").read_text()
    assert "<svg" in svg and "Pareto front" in svg
