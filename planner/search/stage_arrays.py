"""The per-range arrays one program reads: which recompute mode fits, and the stage weights.

A stage's memory grows with the micro-batches it holds in flight (min(k, m) under 1F1B at
position k from the end, m under GPipe), so the fastest recompute mode that fits a range
depends on the position. `most_inflight` finds, once per (option, ZeRO degree), the most
in-flight micro-batches each mode fits on each range; any in-flight count's mode is then a
comparison away instead of a fresh memory sum (the search asks for thousands of them).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from planner.search.tables import OptionCosts

__all__ = ["Fit", "boxes", "kept_weights", "mode_at", "most_inflight", "stage_weights"]

_BIG = 2**31 - 1
"""Stands for "any number of micro-batches fits" (the range holds no activations)."""
_WEIGHTS_BYTES = 128 << 20
"""Stage weights kept across the programs of one search; past it they are recomputed (1024
GPUs would hold ~2 GiB)."""
_HELD = ("weights bytes",)
_CHUNK = 1 << 17
"""Elements per temporary (about 1 MiB): a stack of all in-flight counts of a 99-layer model
is 8 MB an array, and freshly mapped memory costs more in page faults than the arithmetic."""


class Fit(NamedTuple):
    """What fits one option under one ZeRO degree, indexed [mode, end j, start i]."""

    most: np.ndarray
    """Most in-flight micro-batches each mode fits on each range."""
    time_ji: np.ndarray
    """Each mode's stage time (the option's `time_s`)."""
    end_reach: np.ndarray
    """Per end j: the most in-flight micro-batches any finite stage ending there fits."""
    start_reach: np.ndarray
    """Per start i: the same for stages starting there."""


def boxes(fin: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Per leading index: rows [r0, r1) and columns [c0, c1) holding every True entry."""
    rows, cols = fin.any(axis=2), fin.any(axis=1)
    r0, r1 = rows.argmax(axis=1), fin.shape[1] - rows[:, ::-1].argmax(axis=1)
    c0, c1 = cols.argmax(axis=1), fin.shape[2] - cols[:, ::-1].argmax(axis=1)
    return [(int(r0[x]), int(r1[x]), int(c0[x]), int(c1[x])) if rows[x].any() else (0, 0, 0, 0)
            for x in range(len(fin))]


def most_inflight(c: OptionCosts, zero_dp: int) -> Fit:
    """The most in-flight micro-batches f with which each recompute mode fits each range,
    i.e. `c.memory_gib(mode, f, zero_dp) <= c.capacity_gib` exactly, with the modes' times.

    The memory sum is nondecreasing in f (activations are >= 0, and rounding is monotone), so
    the f that fit are 1..q: q is estimated by a division and then corrected with the very sum
    `memory_gib` forms, so the answer is the one the sum gives. Ranges with j <= i (no
    stage; their time is infinite anyway) get 0 or _BIG.
    """
    base = c.fixed_gib + c.sharded_optimizer_gib(zero_dp)
    act = c.act_gib
    cap = c.capacity_gib

    def fits(f: np.ndarray) -> np.ndarray:
        return base + act * f <= cap

    pos = act > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.floor(np.where(pos, (cap - base) / np.where(pos, act, 1.0), 0.0))
    q = np.where(pos, np.clip(est, 0, _BIG), np.where(base <= cap, _BIG, 0)).astype(np.int64)
    while True:
        up = pos & (q < _BIG) & fits(q + 1.0)
        down = pos & (q > 0) & ~fits(q.astype(float))
        if not (up.any() or down.any()):
            break
        q += up.astype(np.int64) - down.astype(np.int64)
    most = np.ascontiguousarray(q.transpose(0, 2, 1))
    time_ji = np.ascontiguousarray(c.time_s.transpose(0, 2, 1))
    # Per range, the most in-flight micro-batches any mode with a finite time fits: a range
    # has a finite stage time exactly while the in-flight count is at most this.
    reach = np.where(np.isfinite(time_ji), most, -1).max(axis=0)
    return Fit(most, time_ji, reach.max(axis=1), reach.max(axis=0))


def mode_at(fit: Fit, inflight: int, i: int, j: int) -> tuple[int, float]:
    """(recompute mode, time) of stage [i, j) holding `inflight` micro-batches: the fastest
    mode that fits (mode 0 and an infinite time when none does)."""
    most, time_ji = fit.most, fit.time_ji
    for r in range(len(most)):
        if most[r, j, i] >= inflight:
            return r, float(time_ji[r, j, i])
    return 0, float("inf")


def _span(reach: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per in-flight count: first and one-past-last index whose reach is >= it, and whether any."""
    ok = reach[None, :] >= f[:, None]
    return ok.argmax(axis=1), len(reach) - ok[:, ::-1].argmax(axis=1), ok.any(axis=1)


def stage_weights(c: OptionCosts, fit: Fit, tail_s: np.ndarray, inflights: list[int], m: int,
                  ) -> dict[int, tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]]:
    """Per in-flight count: (w, t + 2·send, box of the finite w) of every range, where t is
    the fastest fitting mode's time and w = (m − 1)·t + tail (infinite where nothing fits).
    w and t + 2·send are indexed [end j, start i]; the box is (i0, i1, j0, j1)."""
    most, time_ji = fit.most, fit.time_ji
    n1 = time_ji.shape[1]
    step = max(1, _CHUNK // (n1 * n1))
    tail_ji, send_j = tail_s.T[None], 2 * c.send_s[None, :, None]
    out = {}
    for at in range(0, len(inflights), step):
        part = inflights[at:at + step]
        f = np.asarray(part, dtype=np.int64)
        t = np.full((len(part), n1, n1), np.inf)
        for r in range(len(most) - 1, -1, -1):
            np.copyto(t, time_ji[r][None], where=most[r][None] >= f[:, None, None])
        if m > 1:  # (m − 1)·inf + tail is inf: no mask needed (it is for 0·inf)
            w = (m - 1) * t + tail_ji
        else:
            fin = np.isfinite(t)
            w = np.where(fin, (m - 1) * np.where(fin, t, 0.0) + tail_ji, np.inf)
        tc = t + send_j
        # The finite entries' box, from the per-end and per-start reach (no pass over w).
        j0, j1, j_any = _span(fit.end_reach, f)
        i0, i1, _ = _span(fit.start_reach, f)
        for x, flight in enumerate(part):
            box = (int(i0[x]), int(i1[x]), int(j0[x]), int(j1[x])) if j_any[x] else (0, 0, 0, 0)
            out[flight] = (w[x], tc[x], box)
    return out


Weights = dict[int, tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]]


def kept_weights(store: dict, c: OptionCosts, fit: Fit, tail_s: np.ndarray, inflights: list[int],
                 m: int, zero_dp: int) -> Weights:
    """`stage_weights`, kept in `store` (one search's) up to _WEIGHTS_BYTES in all: the weights
    repeat across schedules and islands sharing an option, replica count (its tail) and m.
    The entry holds the costs and the tail, so their ids stay unique while it lives."""
    key = ("w", id(c), zero_dp, id(tail_s), m)
    have: Weights = store[key][2] if key in store else {}
    todo = [f for f in inflights if f not in have]
    if todo:
        more = stage_weights(c, fit, tail_s, todo, m)
        nbytes = sum(w.nbytes + tc.nbytes for w, tc, _ in more.values())
        held = store.get(_HELD, 0)
        if held + nbytes <= _WEIGHTS_BYTES:
            store[_HELD] = held + nbytes
            store.setdefault(key, (c, tail_s, have))
            have.update(more)
        else:
            have = {**have, **more}
    return have
