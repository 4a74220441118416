"""Brute force on clusters of up to 12 GPUs, judged by `estimate` (never the search's closed form).

The oracle is written without planner.search. It lists, on two GPU groups of one node each,
every plan of a space small enough to enumerate that still holds what the search used to
miss: 1F1B, GPipe and interleaved (V = 2, *every* contiguous split into chunks, uneven ones
included) pipelines of one or two stages, each stage on any group at TP 1, d identical
replicas of one pipeline (homogeneous data parallelism) or two classes on the two groups side
by side (heterogeneous data parallelism, every split of the micro-batches between the
classes), micro-batch sizes 1 and 2. The planner searches a superset of this space, so its
answer must be at least as good as the oracle's; its certified lower bound must lie below
every plan the oracle costs.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cluster import cluster_from_dict
from planner.costing.estimate import estimate
from planner.errors import HetplanError
from planner.schema import Plan
from planner.search import plan
from tests.test_search_exact import tiny_graph

GBS = 4
TPS = (1,)
"""TP 1 only keeps the oracle within seconds; TP is covered by test_search_exact's oracle."""


def _cluster(groups: list[tuple[str, int, str]]):
    return cluster_from_dict({"name": "b12", "nodes": [
        {"name": f"g{i}", "count": 1, "gpu": gpu, "gpus_per_node": k, "intra_node": link,
         "inter_node_gbps": 25, "price_per_gpu_hour": 1.0 + i}
        for i, (gpu, k, link) in enumerate(groups)]})


def _pipelines(n: int, island: list[int], budget: dict[int, int]):
    """(schedule, chunks, devices): chunks are (start, end, device index) in order."""
    devices = [(g, tp) for g in island for tp in TPS]
    for dev in devices:
        if dev[1] <= budget[dev[0]]:
            yield "1f1b", ((0, n, 0),), (dev,)
            yield "gpipe", ((0, n, 0),), (dev,)
    for a, b in itertools.product(devices, repeat=2):
        use: dict[int, int] = {}
        for g, tp in (a, b):
            use[g] = use.get(g, 0) + tp
        if any(use[g] > budget[g] for g in use):
            continue
        for cut in range(1, n):
            for sched in ("1f1b", "gpipe"):
                yield sched, ((0, cut, 0), (cut, n, 1)), (a, b)
        for cuts in itertools.combinations(range(1, n), 3):  # V = 2: 4 chunks, any split
            bounds = (0, *cuts, n)
            yield "interleaved", tuple((bounds[k], bounds[k + 1], k % 2) for k in range(4)), (a, b)


def _build(cluster, b: int, sched: str, classes, counts) -> Plan | None:
    """classes: [(chunks, devices, replicas)], counts: micro-batches per pipeline."""
    nodes = [g.node_names()[0] for g in cluster.groups]
    free = [0] * len(nodes)
    ranks, pipes, k = [], [], 0
    for chunks, devices, replicas in classes:
        for _ in range(replicas):
            placed = []
            for g, tp in devices:
                rs = []
                for _ in range(tp):
                    rs.append(len(ranks))
                    ranks.append({"rank": len(ranks), "node": nodes[g], "local_rank": free[g]})
                    free[g] += 1
                placed.append(rs)
            stages = [{"layers": [s, e], "gpu": cluster.groups[devices[d][0]].gpu.name,
                       "tp": devices[d][1], "ranks": placed[d]} for s, e, d in chunks]
            pipes.append({"microbatches": counts[k], "stages": stages})
            k += 1
    if any(f > g.gpus for f, g in zip(free, cluster.groups, strict=True)):
        return None
    try:
        return Plan.from_dict({"global_batch_size": GBS, "micro_batch_size": b,
                               "schedule": sched, "virtual_stages": 2 if sched == "interleaved"
                               else 1, "zero1": len(pipes) > 1, "pipelines": pipes,
                               "ranks": ranks})
    except HetplanError:
        return None


def _even(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if r < total % parts else 0) for r in range(parts)]


def oracle(graph, cluster) -> tuple[float, list[float]]:
    """(least iteration time, every feasible plan's time)."""
    n = len(graph.layers)
    sizes = [g.gpus for g in cluster.groups]
    times: list[float] = []

    def judge(p: Plan | None) -> None:
        if p is None:
            return
        try:
            est = estimate(graph, cluster, p)
        except HetplanError:
            return  # the estimate's own rules refuse it (e.g. Megatron's interleaving rule)
        if est.feasible:
            times.append(est.iteration_time_s)

    for b in (1, 2):
        total = GBS // b
        # Homogeneous DP: d replicas of one pipeline on both groups.
        for d in range(1, total + 1):
            budget = {g: sizes[g] // d for g in range(len(sizes))}
            if not all(budget.values()) and d > 1:
                continue
            for sched, chunks, devs in _pipelines(n, [0, 1], budget):
                judge(_build(cluster, b, sched, [(chunks, devs, d)], _even(total, d)))
        # Heterogeneous DP: a class on each group, every split between the classes.
        for d0, d1 in itertools.product(range(1, sizes[0] + 1), range(1, sizes[1] + 1)):
            if d0 + d1 > total:
                continue
            c0 = [p for p in _pipelines(n, [0], {0: sizes[0] // d0, 1: 0}) if len(p[2]) == 1]
            c1 = [p for p in _pipelines(n, [1], {0: 0, 1: sizes[1] // d1}) if len(p[2]) == 1]
            for (s0, ch0, dv0), (s1, ch1, dv1) in itertools.product(c0, c1):
                if s0 != s1:
                    continue
                for m0 in range(d0, total - d1 + 1):
                    counts = _even(m0, d0) + _even(total - m0, d1)
                    judge(_build(cluster, b, s0, [(ch0, dv0, d0), (ch1, dv1, d1)], counts))
    return min(times, default=float("inf")), times


def _check(groups, blocks: int) -> None:
    graph = tiny_graph(blocks)
    cluster = _cluster(groups)
    best, times = oracle(graph, cluster)
    result = plan(graph, cluster, global_batch_size=GBS, micro_batch_sizes=(1, 2))
    found = result.estimates[0].iteration_time_s
    assert found <= best * (1 + 1e-9), f"planner {found} worse than brute force {best}"
    lb = result.stats.lower_bound
    assert lb is not None and all(lb <= t * (1 + 1e-12) for t in times)
    assert not result.stats.exact or found <= lb * (1 + 1e-9)


CASES = [
    ([("A100-SXM4-80GB", 4, "nvlink"), ("T4", 8, "pcie")], 2),
    ([("V100-SXM2-32GB", 8, "nvlink"), ("T4", 4, "pcie")], 2),
    ([("A100-SXM4-80GB", 2, "nvlink"), ("V100-SXM2-16GB", 8, "nvlink")], 4),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_planner_never_worse_than_brute_force_12(case):
    _check(*case)


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(kinds=st.lists(st.sampled_from(["A100-SXM4-80GB", "V100-SXM2-32GB", "T4"]),
                      min_size=2, max_size=2, unique=True),
       sizes=st.tuples(st.sampled_from([8]), st.sampled_from([2, 4])),
       blocks=st.sampled_from([2, 3]))
def test_property_random_clusters_up_to_12(kinds, sizes, blocks):
    """10 or 12 GPUs: the planner's fast mode (test_search_exact covers the small one)."""
    groups = [(k, s, "pcie") for k, s in zip(kinds, sizes, strict=True)]
    _check(groups, blocks)
