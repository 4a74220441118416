"""Heterogeneous data parallelism: pipelines of different shapes on disjoint GPU groups.

Each island (a set of GPU groups) contributes one class of d identical pipelines; the classes
of disjoint islands run side by side and share the global batch. A pipeline with stage times
t_s takes a + m·b for m micro-batches (a = Σ(t + 2·send) − max t, b = max t), so the split
that minimises the slowest pipeline is the greedy one (`assemble.split_microbatches`).

A class's best pipeline depends on the whole plan: ZeRO-1 shards optimizer state over all P
pipelines (memory), the DP all-reduce rings over all P, and the micro-batches it receives
weight its bottleneck. So each island is re-solved for the plan it sits in: first with an
equal share of the micro-batches, then with the share the split gives, until it settles.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence

from planner.search.assemble import PipelineClass, split_microbatches
from planner.search.template import objective

__all__ = ["disjoint_families", "heterogeneous_plans"]

_ROUNDS = 3
_SHORTLIST = 2
"""Replica counts per island tried in large clusters (the fastest alone)."""

Solver = Callable[[tuple[int, ...], int, int, int], list[PipelineClass]]
Entry = tuple[float, tuple, tuple[PipelineClass, ...], tuple[int, ...]]


def disjoint_families(islands: Sequence[tuple[int, ...]]) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every set of ≥ 2 pairwise-disjoint islands, in a fixed order."""
    islands = sorted(islands, key=lambda i: (len(i), i))

    def rec(start: int, used: frozenset[int], chosen: list[tuple[int, ...]]):
        if len(chosen) >= 2:
            yield tuple(chosen)
        for k in range(start, len(islands)):
            isl = islands[k]
            if used.isdisjoint(isl):
                chosen.append(isl)
                yield from rec(k + 1, used | set(isl), chosen)
                chosen.pop()

    yield from rec(0, frozenset(), [])


def shortlist(classes: list[PipelineClass], total_mb: int) -> list[int]:
    """Replica counts whose best class is fastest alone."""
    best: dict[int, float] = {}
    for c in classes:
        score = objective(c.template, -(-total_mb // c.replicas))
        best[c.replicas] = min(best.get(c.replicas, score), score)
    return sorted(best, key=lambda d: (best[d], d))[:_SHORTLIST]


def _split(combo: Sequence[PipelineClass], total_mb: int):
    """Micro-batches per pipeline and the span they give: a function of the classes' timings
    and `total_mb` only (the key `heterogeneous_plans` caches it under)."""
    pipes = []
    for cls in combo:
        t = cls.template
        # Every pipeline needs one micro-batch (1F1B with m < S is legal).
        pipes.extend([(t.sum_s - t.max_time_s, t.max_time_s, 1)] * cls.replicas)
    counts = split_microbatches(total_mb, pipes)
    if counts is None:
        return None, None
    span = max(a + m * b for (a, b, _), m in zip(pipes, counts, strict=True))
    return counts, span + max(c.template.max_tail_s for c in combo)


def heterogeneous_plans(solver: Solver, replica_choices: dict[tuple[int, ...], list[int]],
                        total_mb: int, per_island: int = 1,
                        splits: dict | None = None) -> Iterator[Entry]:
    """(score, key, classes, micro-batches per pipeline) for families of disjoint islands.

    `solver(island, d, pipelines, microbatches)` returns the island's classes, best first;
    the best `per_island` of each island are combined (the estimate's DP all-reduce depends
    on the partners, so an island's runner-up can make the better pair). `splits` keeps each
    combination's split across calls (the search combines its growing set of classes again
    and again; a split is a pure function of the classes and the micro-batch count).
    """
    splits = {} if splits is None else splits
    for family in disjoint_families(list(replica_choices)):
        for ds in itertools.product(*(replica_choices[isl] for isl in family)):
            total_p = sum(ds)
            if total_p > total_mb:
                continue
            shares = [total_mb // total_p] * len(family)
            tried: set[tuple[int, ...]] = set()
            for _ in range(_ROUNDS):
                if tuple(shares) in tried:
                    break
                tried.add(tuple(shares))
                options = []
                for isl, d, m in zip(family, ds, shares, strict=True):
                    found = solver(isl, d, total_p, max(m, 1))
                    if not found:
                        break
                    options.append(found[:per_island])
                if len(options) < len(family):
                    break
                best: tuple | None = None
                for combo in itertools.product(*options):
                    memo = (total_mb, tuple(map(id, combo)))
                    hit = splits.get(memo)
                    if hit is None:  # the entry holds the classes, so their ids stay unique
                        hit = splits[memo] = (combo, *_split(combo, total_mb))
                    counts, score = hit[1], hit[2]
                    if counts is None:
                        continue
                    key = tuple((isl, c.replicas, c.template.key())
                                for isl, c in zip(family, combo, strict=True))
                    yield score, key, tuple(combo), tuple(counts)
                    if best is None or score < best[0]:
                        best = (score, combo, counts)
                if best is None:
                    break
                pos, shares = 0, []
                for cls in best[1]:
                    shares.append(max(best[2][pos: pos + cls.replicas]))
                    pos += cls.replicas
