"""The local refinement: every move it takes is judged by `estimate` and strictly improves it,
its plans stay valid, and interleaved chunk boundaries may end up uneven."""

from __future__ import annotations

from planner.costing.estimate import estimate
from planner.schema import Plan
from planner.search import plan
from planner.search.interleave import interleaved_variant
from planner.search.refine import moves, refine
from tests.test_search_exact import GPUS, make_cluster, scale_memory, tiny_graph


def _instance():
    graph = tiny_graph(6)
    cluster = scale_memory(make_cluster([(GPUS[0], 2, 0), (GPUS[1], 2, 0)]), graph, [1.0, 0.6])
    return graph, cluster


def _even_interleaved(graph, cluster) -> Plan:
    """A two-stage 1F1B plan (the best the search finds on two A100s) dealt into V = 2."""
    a100 = make_cluster([(GPUS[0], 2, 0)])
    start = plan(graph, scale_memory(a100, graph, [0.6]), global_batch_size=8,
                 schedules=["1f1b"], top_k=20)
    two = next(p for p in start.candidates if len(p.pipelines[0].stages) == 2)
    even = interleaved_variant(Plan.model_validate({**two.to_dict(), "cluster": cluster.spec}))
    assert even is not None
    return even


def test_refine_only_takes_moves_the_estimate_rates_better():
    graph, cluster = _instance()
    even = _even_interleaved(graph, cluster)
    calls = []

    def judge(p: Plan):
        est = estimate(graph, cluster, p)
        calls.append(p)
        return ((est.iteration_time_s, 0), est) if est.feasible else None

    base = estimate(graph, cluster, even).iteration_time_s
    found, spent = refine(even, (base, 0), judge, ("interleaved",), (1, 2), 200)
    assert spent == len(calls) <= 200
    last = base
    for key, p, est in found:
        assert key[0] < last  # strictly better each time, by the estimate itself
        last = key[0]
        again = Plan.model_validate(p.to_dict())  # the structure rules hold
        assert estimate(graph, cluster, again).iteration_time_s == est.iteration_time_s


def test_moves_cover_uneven_chunks_and_recompute():
    graph, cluster = _instance()
    even = _even_interleaved(graph, cluster)
    near = [m() for m in moves(even, ("interleaved",), (1, 2))]
    near = [p for p in near if p is not None]
    sizes = {tuple(st.layers[1] - st.layers[0] for st in p.pipelines[0].stages) for p in near}
    assert len(sizes) > 2  # boundaries of single chunks move, not each device's total only
    modes = {st.recompute for p in near for st in p.pipelines[0].stages}
    assert modes == {"none", "selective", "full"}
