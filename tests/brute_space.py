"""Enumerations the brute-force oracles of the search tests share (judged by `estimate`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

RECOMPUTE = ("none", "selective", "full")


def pipelines(n: int, budget: int) -> Iterator[list[tuple[int, int, int, str]]]:
    """Every pipeline over n layers: stage bounds, TP 1/2/4 per stage within `budget` GPUs,
    recompute per stage, as (start, end, tp, recompute) per stage."""
    for s_count in range(1, n + 1):
        for cuts in itertools.combinations(range(1, n), s_count - 1):
            bounds = (0, *cuts, n)
            for tps in itertools.product((1, 2, 4), repeat=s_count):
                if sum(tps) > budget:
                    continue
                for rcs in itertools.product(RECOMPUTE, repeat=s_count):
                    yield [(bounds[k], bounds[k + 1], tps[k], rcs[k]) for k in range(s_count)]


def splits(total: int, parts: int, least: int) -> Iterator[tuple[int, ...]]:
    """Every way to write `total` as `parts` ordered parts of at least `least` each."""
    if parts == 1:
        if total >= least:
            yield (total,)
        return
    for first in range(least, total - least * (parts - 1) + 1):
        for rest in splits(total - first, parts - 1, least):
            yield (first, *rest)


def four_gpu_cluster(memory_gib: float):
    """One node of 4 A100s (NVLink) whose memory is `memory_gib`: a test sets it so that
    exactly the plans it means to rule out do not fit."""
    import dataclasses

    from planner.cluster import cluster_from_dict

    c = cluster_from_dict({"name": "one", "nodes": [
        {"name": "g", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 4,
         "intra_node": "nvlink", "inter_node_gbps": 100}]})
    return dataclasses.replace(c, groups=tuple(
        dataclasses.replace(g, gpu=dataclasses.replace(g.gpu, memory_gib=memory_gib))
        for g in c.groups))


def one_node_plan(gpu: str, gbs: int, b: int, pipe, counts, extra=None):
    """A 1F1B plan on node "g": `pipe` (from `pipelines`) replicated once per micro-batch
    count in `counts`, ranks in order; `extra[k]` adds keys (e.g. ep, cp) to stage k."""
    from planner.schema import Plan

    ranks, pipes = [], []
    for m in counts:
        stages = []
        for k, (start, end, tp, rc) in enumerate(pipe):
            rs = list(range(len(ranks), len(ranks) + tp))
            ranks.extend({"rank": r, "node": "g", "local_rank": r} for r in rs)
            stages.append({"layers": [start, end], "gpu": gpu, "tp": tp, "ranks": rs,
                           "recompute": rc, **((extra or {}).get(k) or {})})
        pipes.append({"microbatches": m, "stages": stages})
    return Plan.from_dict({"global_batch_size": gbs, "micro_batch_size": b, "schedule": "1f1b",
                           "zero1": len(counts) > 1, "pipelines": pipes, "ranks": ranks})
