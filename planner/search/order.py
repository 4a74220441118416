"""Deterministic orders the search ranks by: a total order on plans (the last tie-breaker)
and the candidates' (score, contents) order, built without repr for untied scores."""

from __future__ import annotations

from planner.schema import Plan

__all__ = ["by_score", "plan_key"]


def plan_key(p: Plan) -> tuple:
    """A total, deterministic order on plans (the last tie-breaker of the ranking)."""
    return (p.micro_batch_size, p.schedule, p.virtual_stages,
            tuple((pp.microbatches, tuple((s.layers, s.gpu, s.tp, s.ranks, s.recompute, s.cp or 1,
                                           s.ep or 1) for s in pp.stages)) for pp in p.pipelines),
            tuple((r.node, r.local_rank) for r in p.ranks))


def by_score(entries: list) -> list:
    """Candidate entries in the order of the key (score, repr(contents)), building the repr
    only where scores tie (a few of hundreds): sorted by score, then each run of equal scores
    by repr; both sorts are stable, so equal keys keep their order as in one sort by the key."""
    if any(r[0] != r[0] for r in entries):  # a NaN score: no total order, take the one sort
        return sorted(entries, key=lambda r: (r[0], repr(r[1])))
    out = sorted(entries, key=lambda r: r[0])
    i = 0
    while i < len(out):
        j = i + 1
        while j < len(out) and out[j][0] == out[i][0]:
            j += 1
        if j - i > 1:
            out[i:j] = sorted(out[i:j], key=lambda r: repr(r[1]))
        i = j
    return out
