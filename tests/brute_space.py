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
