"""The event simulation's arithmetic without its bookkeeping, for `simulate(detail=False)`.

Every time the event loop (`engine.py`) computes is `max(a, b) + w`: an op ends at
max(its device's previous end, its input's arrival) + its duration, and a transfer arrives at
max(its producer's end, the previous micro-batch's arrival on that link) + send_s. Which
values feed which depends only on the schedule's shape (S, V, m, schedule), so it is worked
out once per shape here (by the engine's own round-robin walk, so every value is computed
from the same operands in the same order) and each simulation is one flat loop over
(a, b, w) index triples: the same floats, at about half the cost. Maxima are exact, so the
result does not depend on which operand a tie picks.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache, reduce
from operator import add

from planner.simulate.order import device_orders
from planner.simulate.timeline import StageTiming

__all__ = ["pipeline_times"]

_ZERO = 0
"""Index of the constant 0.0 in the value list (time zero; no previous op or transfer)."""


def pipeline_times(chunks: Sequence[StageTiming], s_count: int, v: int, m: int,
                   schedule: str) -> tuple[list[float], list[float]]:
    """Per device: when its last op ends, and its busy time (its op durations summed in run
    order, as the event loop sums them)."""
    n = len(chunks)
    xs, ys, ws, last_op, busy_w = _compiled(s_count, v, m, schedule)
    weights = ([c.fwd_s for c in chunks] + [c.bwd_s for c in chunks]
               + [c.send_s for c in chunks])
    assert len(weights) == 3 * n
    values = [0.0]
    append = values.append
    for x, y, w in zip(xs, ys, map(weights.__getitem__, ws), strict=True):
        a = values[x]
        b = values[y]
        append((a if a > b else b) + w)
    free = [values[k] for k in last_op]
    busy = [reduce(add, map(weights.__getitem__, idx), 0.0) for idx in busy_w]
    return free, busy


@lru_cache(maxsize=64)
def _compiled(s_count: int, v: int, m: int, schedule: str
              ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...],
                         tuple[tuple[int, ...], ...]]:
    """The value graph of one schedule shape, in the event loop's evaluation order: value k
    (k ≥ 1) is max(value xs[k-1], value ys[k-1]) + weight ws[k-1], weights being the chunks'
    fwd_s, then bwd_s, then send_s. Also per device: the value of its last op, and the
    weights of its ops in run order. Raises RuntimeError where the event loop would."""
    orders = device_orders(s_count, v, m, schedule)
    n = s_count * v
    last = n - 1
    xs: list[int] = []
    ys: list[int] = []
    ws: list[int] = []

    def value(x: int, y: int, w: int) -> int:
        xs.append(x)
        ys.append(y)
        ws.append(w)
        return len(xs)

    fwd_end = [[-1] * m for _ in range(n)]
    bwd_end = [[-1] * m for _ in range(n)]
    act_at = [[-1] * m for _ in range(n)]
    grad_at = [[-1] * m for _ in range(n)]
    dev_last = [_ZERO] * s_count
    ptr = [0] * s_count
    done_devices = 0
    while done_devices < s_count:
        moved = False
        done_devices = 0
        for d in range(s_count):
            order = orders[d]
            k = ptr[d]
            while k < len(order):
                backward, i, c = order[k]
                if backward:
                    if c == last:
                        ready = fwd_end[c][i]
                    else:
                        ready = grad_at[c][i]
                        if ready < 0 and bwd_end[c + 1][i] >= 0:
                            prev = grad_at[c][i - 1] if i and grad_at[c][i - 1] >= 0 else _ZERO
                            ready = grad_at[c][i] = value(bwd_end[c + 1][i], prev, 2 * n + c)
                    if ready < 0 or fwd_end[c][i] < 0:
                        break
                    bwd_end[c][i] = dev_last[d] = value(dev_last[d], ready, n + c)
                else:
                    if c == 0:
                        ready = _ZERO
                    else:
                        ready = act_at[c - 1][i]
                        if ready < 0:
                            if fwd_end[c - 1][i] < 0:
                                break
                            prev = (act_at[c - 1][i - 1] if i and act_at[c - 1][i - 1] >= 0
                                    else _ZERO)
                            ready = act_at[c - 1][i] = value(fwd_end[c - 1][i], prev,
                                                             2 * n + c - 1)
                    fwd_end[c][i] = dev_last[d] = value(dev_last[d], ready, c)
                k += 1
                moved = True
            ptr[d] = k
            if k == len(order):
                done_devices += 1
        if not moved and done_devices < s_count:
            raise RuntimeError(f"schedule {schedule!r} deadlocked at ops {ptr}; this is a bug")
    busy_w = tuple(tuple(n + c if backward else c for backward, _, c in order)
                   for order in orders)
    return tuple(xs), tuple(ys), tuple(ws), tuple(dev_last), busy_w
