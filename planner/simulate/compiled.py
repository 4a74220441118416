"""The event simulation's arithmetic without its bookkeeping, for `simulate(detail=False)`.

Every time the event loop (`engine.py`) computes is `max(a, b) + w`: an op ends at
max(its device's previous end, its input's arrival) + its duration, and a transfer arrives at
max(its producer's end, the previous micro-batch's arrival on that link) + send_s. Which
values feed which depends only on the schedule's shape (S, V, m, schedule), so it is worked
out once per shape here, by the engine's own round-robin walk, and each simulation is one
flat loop over the ops: the same floats from the same operands (maxima are exact, so which
operand a tie picks does not matter), at under half the cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache, reduce
from operator import add, itemgetter

from planner.simulate.order import device_orders
from planner.simulate.timeline import StageTiming

__all__ = ["pipeline_times"]

_ZERO = 0
"""Index of the value 0.0 (time zero: nothing before)."""

Compiled = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...],
                 tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...]]


def pipeline_times(chunks: Sequence[StageTiming], s_count: int, v: int, m: int,
                   schedule: str) -> tuple[list[float], list[float]]:
    """Per device: when its last op ends, and its busy time (its op durations summed in run
    order, as the event loop sums them)."""
    src, prev, w_in, dev, w_op, last_op, busy_w = _compiled(s_count, v, m, schedule)
    # Weights: the chunks' fwd_s, bwd_s, send_s, then 0.0 (a local input's "transfer").
    weights = ([c.fwd_s for c in chunks] + [c.bwd_s for c in chunks]
               + [c.send_s for c in chunks] + [0.0])
    at = weights.__getitem__
    values = [0.0]
    append = values.append
    # Every schedule has ≥ 2 ops (a forward and a backward), so itemgetter returns tuples.
    sends, durations = itemgetter(*w_in)(weights), itemgetter(*w_op)(weights)
    # Per op two values: its input's arrival, max(producer, previous arrival) + send_s (a
    # local input: max(its end, 0.0) + 0.0, the end itself, exactly), then its end,
    # max(device free, arrival) + duration.
    for x, y, s, d, w in zip(src, prev, sends, dev, durations, strict=True):
        a = values[x]
        b = values[y]
        r = (a if a > b else b) + s
        append(r)
        t = values[d]
        append((t if t > r else r) + w)
    free = [values[k] for k in last_op]
    busy = [reduce(add, map(at, idx), 0.0) for idx in busy_w]
    return free, busy


@lru_cache(maxsize=16)  # one 32-stage shape at m = 512 is ~14 MiB
def _compiled(s_count: int, v: int, m: int, schedule: str) -> Compiled:
    """The ops of one schedule shape in the event loop's evaluation order, as value indices:
    op k's arrival is value 2k + 1 = max(value src[k], value prev[k]) + weight w_in[k], its end
    value 2k + 2 = max(value dev[k], value 2k + 1) + weight w_op[k]; weights index the chunks'
    fwd_s, then bwd_s, then send_s, then 0.0. Also per device its last op's value and its ops'
    weights in run order. Raises RuntimeError where the event loop would."""
    orders = device_orders(s_count, v, m, schedule)
    n = s_count * v
    last, local = n - 1, 3 * n
    src: list[int] = []
    prev: list[int] = []
    w_in: list[int] = []
    dev: list[int] = []
    w_op: list[int] = []
    fwd_end = [[-1] * m for _ in range(n)]
    bwd_end = [[-1] * m for _ in range(n)]
    act_at = [[-1] * m for _ in range(n)]  # arrival of chunk c's activation at c + 1
    grad_at = [[-1] * m for _ in range(n)]  # arrival of chunk c + 1's gradient at c
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
                arrival = 2 * len(src) + 1
                if backward:
                    if fwd_end[c][i] < 0:
                        break
                    if c == last:
                        src.append(fwd_end[c][i])
                        prev.append(_ZERO)
                        w_in.append(local)
                    else:
                        if bwd_end[c + 1][i] < 0:
                            break
                        src.append(bwd_end[c + 1][i])
                        prev.append(grad_at[c][i - 1] if i else _ZERO)
                        w_in.append(2 * n + c)
                        grad_at[c][i] = arrival
                    w_op.append(n + c)
                    bwd_end[c][i] = arrival + 1
                else:
                    if c == 0:
                        src.append(_ZERO)
                        prev.append(_ZERO)
                        w_in.append(local)
                    else:
                        if fwd_end[c - 1][i] < 0:
                            break
                        src.append(fwd_end[c - 1][i])
                        prev.append(act_at[c - 1][i - 1] if i else _ZERO)
                        w_in.append(2 * n + c - 1)
                        act_at[c - 1][i] = arrival
                    w_op.append(c)
                    fwd_end[c][i] = arrival + 1
                dev.append(dev_last[d])
                dev_last[d] = arrival + 1
                k += 1
                moved = True
            ptr[d] = k
            if k == len(order):
                done_devices += 1
        if not moved and done_devices < s_count:
            raise RuntimeError(f"schedule {schedule!r} deadlocked at ops {ptr}; this is a bug")
    # Micro-batch i − 1 crossed each link before i: its consumer ran earlier on that device.
    if -1 in prev:  # a dependency left unresolved would read values[-1] silently
        raise RuntimeError(f"schedule {schedule!r}: an op has no producer; this is a bug")
    busy_w = tuple(tuple(n + c if backward else c for backward, _, c in order)
                   for order in orders)
    return (tuple(src), tuple(prev), tuple(w_in), tuple(dev), tuple(w_op), tuple(dev_last),
            busy_w)
