"""Event simulation of one pipeline's iteration over heterogeneous chunks and p2p delays.

Each device runs one op at a time, in its schedule's order (`order.py`). An op starts when its
device is free and its input has arrived: a forward needs the previous chunk's forward output,
a backward needs the next chunk's backward gradient and its own forward. p2p transfers run
beside compute (separate streams), so a send never blocks the sender; each link carries one
micro-batch at a time per direction, in order (`send_s` each), so transfers slower than the
compute queue up. After its last backward a device all-reduces its gradients over data
parallelism (`dp_sync_s`) and steps the optimizer (`optimizer_s`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from planner.simulate.closed_form import uniform_makespan_s
from planner.simulate.compiled import pipeline_times
from planner.simulate.order import device_orders
from planner.simulate.timeline import Event, StageTiming, Timeline

__all__ = ["simulate", "with_events"]


def simulate(chunks: Sequence[StageTiming], microbatches: int, schedule: str = "1f1b",
             virtual_stages: int = 1, *, dp_sync_s: Sequence[float] | None = None,
             optimizer_s: Sequence[float] | None = None, detail: bool = True) -> Timeline:
    """Simulate one iteration; chunks are in layer order, chunk j on device j % S.

    `dp_sync_s` and `optimizer_s` give per device the exposed gradient all-reduce and the
    optimizer step that follow its last backward (default 0). `detail=False` skips building
    `events` (about half the cost; the search wants only the numbers) and, for identical
    chunks with free p2p, uses the closed form, which the tests check equals the simulation.
    Raises ValueError on a shape the schedule does not support (e.g. interleaved with
    micro-batches not divisible by S).
    """
    v = virtual_stages
    n_chunks = len(chunks)
    if n_chunks == 0 or v < 1 or n_chunks % v:
        raise ValueError(f"{n_chunks} chunks do not divide into {v} virtual stages")
    s_count = n_chunks // v
    for j, ch in enumerate(chunks):
        if ch.device != j % s_count:
            raise ValueError(f"chunk {j} runs on device {ch.device}; with {s_count} devices it "
                             f"must run on device {j % s_count}")
        if min(ch.fwd_s, ch.bwd_s, ch.send_s, ch.recompute_s) < 0 or ch.recompute_s > ch.bwd_s:
            raise ValueError(f"chunk {j}: times must be ≥ 0 and recompute_s ≤ bwd_s, got {ch}")
    sync = _per_device(dp_sync_s, s_count, "dp_sync_s")
    opt = _per_device(optimizer_s, s_count, "optimizer_s")
    orders = device_orders(s_count, v, microbatches, schedule)
    if not detail and not any(sync) and not any(opt) and _uniform(chunks):
        return _closed_form(chunks, s_count, v, microbatches, schedule, orders, sync, opt)
    if not detail:  # the same arithmetic, compiled per schedule shape (compiled.py)
        free, busy = _times(tuple(chunks), s_count, v, microbatches, schedule)
        return _finished(chunks, s_count, v, microbatches, schedule, orders, sync, opt, free,
                         busy, [], [[] for _ in range(s_count)], detail=False)

    m = microbatches
    last = n_chunks - 1
    fwd_s = [c.fwd_s for c in chunks]
    bwd_s = [c.bwd_s for c in chunks]
    send_s = [c.send_s for c in chunks]
    rec_s = [c.recompute_s for c in chunks]
    fwd_end = [[-1.0] * m for _ in range(n_chunks)]
    bwd_end = [[-1.0] * m for _ in range(n_chunks)]
    # Arrival of chunk c's activation at c + 1 / of chunk c + 1's gradient at c. A link carries
    # one micro-batch at a time in each direction (FIFO: micro-batches cross it in order), so
    # a transfer starts when its tensor is ready and the previous one has arrived.
    act_at = [[-1.0] * m for _ in range(n_chunks)]
    grad_at = [[-1.0] * m for _ in range(n_chunks)]
    free = [0.0] * s_count
    ptr = [0] * s_count
    busy = [0.0] * s_count
    done_devices = 0
    # (device, kind, micro, chunk, start, end) per device, in run order.
    runs: list[list[tuple[int, str, int, int, float, float]]] = [[] for _ in range(s_count)]
    while done_devices < s_count:
        moved = False
        done_devices = 0
        for d in range(s_count):
            order = orders[d]
            k, t, log = ptr[d], free[d], runs[d]
            n_ops = len(order)
            while k < n_ops:
                backward, i, c = order[k]
                if backward:
                    if c == last:
                        ready = fwd_end[c][i]
                    else:
                        arrivals = grad_at[c]
                        ready = arrivals[i]
                        if ready < 0.0:
                            ready = bwd_end[c + 1][i]
                            if ready >= 0.0:  # inline FIFO link: wait for micro-batch i − 1
                                if i and arrivals[i - 1] > ready:
                                    ready = arrivals[i - 1]
                                ready += send_s[c]
                                arrivals[i] = ready
                    if ready < 0.0 or fwd_end[c][i] < 0.0:
                        break
                    start = t if t > ready else ready
                    end = start + bwd_s[c]
                    bwd_end[c][i] = end
                    if detail:
                        r = rec_s[c]
                        if r > 0.0:
                            log.append((d, "recompute", i, c, start, start + r))
                            log.append((d, "bwd", i, c, start + r, end))
                        else:
                            log.append((d, "bwd", i, c, start, end))
                    busy[d] += bwd_s[c]
                else:
                    if c == 0:
                        ready = 0.0
                    else:
                        arrivals = act_at[c - 1]
                        ready = arrivals[i]
                        if ready < 0.0:
                            ready = fwd_end[c - 1][i]
                            if ready < 0.0:
                                break
                            if i and arrivals[i - 1] > ready:
                                ready = arrivals[i - 1]
                            ready += send_s[c - 1]
                            arrivals[i] = ready
                    start = t if t > ready else ready
                    end = start + fwd_s[c]
                    fwd_end[c][i] = end
                    if detail:
                        log.append((d, "fwd", i, c, start, end))
                    busy[d] += fwd_s[c]
                t = end
                k += 1
                moved = True
            ptr[d], free[d] = k, t
            if k == n_ops:
                done_devices += 1
        if not moved and done_devices < s_count:
            raise RuntimeError(f"schedule {schedule!r} deadlocked at ops {ptr}; this is a bug")

    return _finished(chunks, s_count, v, m, schedule, orders, sync, opt, free, busy,
                     [(act_at[c], grad_at[c]) for c in range(last)], runs, detail=detail)


def _finished(chunks: Sequence[StageTiming], s_count: int, v: int, m: int, schedule: str,
              orders: Sequence[Sequence[tuple[bool, int, int]]], sync: list[float],
              opt: list[float], free: Sequence[float], busy: Sequence[float],
              arrivals: list[tuple[list[float], list[float]]],
              runs: list[list[tuple[int, str, int, int, float, float]]], *,
              detail: bool) -> Timeline:
    """The tails after each device's last op, and the Timeline (with events from `runs` and
    `arrivals`, per link its activation and gradient arrival times, under `detail`)."""
    send_s = [c.send_s for c in chunks]
    pipeline_s = max(free)
    makespan = pipeline_s
    for d in range(s_count):
        t = free[d]
        if sync[d] > 0.0:
            runs[d].append((d, "dp_sync", -1, -1, t, t + sync[d]))
            t += sync[d]
        if opt[d] > 0.0:
            runs[d].append((d, "optimizer", -1, -1, t, t + opt[d]))
            t += opt[d]
        makespan = max(makespan, t)

    events = [Event(*e) for log in runs for e in log] if detail else []
    for c, (act_at, grad_at) in enumerate(arrivals if detail else ()):
        if send_s[c] > 0.0:
            dev, nxt = chunks[c].device, chunks[c + 1].device
            for i in range(m):  # drawn while on the wire (after any wait for the link)
                a, g = act_at[i], grad_at[i]
                events.append(Event(dev, "send", i, c, a - send_s[c], a))
                events.append(Event(nxt, "send_grad", i, c + 1, g - send_s[c], g))
    bubble = 1.0 - sum(busy) / (s_count * pipeline_s) if pipeline_s > 0 else 0.0
    return _timeline(chunks, s_count, v, m, schedule, orders, sync, opt, makespan_s=makespan,
                     pipeline_s=pipeline_s, bubble=bubble, busy=tuple(busy), events=events)


def with_events(timeline: Timeline) -> Timeline:
    """The same iteration with its events (for Gantt charts), re-simulated from its inputs
    when it came from a `detail=False` run."""
    if timeline.events or not timeline.chunks:
        return timeline
    return simulate(timeline.chunks, timeline.microbatches, timeline.schedule,
                    timeline.virtual_stages, dp_sync_s=timeline.dp_sync_s or None,
                    optimizer_s=timeline.optimizer_s or None)


def _uniform(chunks: Sequence[StageTiming]) -> bool:
    first = chunks[0]
    return all(c.fwd_s == first.fwd_s and c.bwd_s == first.bwd_s and c.send_s == 0.0
               for c in chunks)


def _closed_form(chunks: Sequence[StageTiming], s_count: int, v: int, m: int, schedule: str,
                 orders: list[list[tuple[bool, int, int]]], sync: list[float],
                 opt: list[float]) -> Timeline:
    chunk = chunks[0]
    per_device_s = v * (chunk.fwd_s + chunk.bwd_s)
    pipeline_s = uniform_makespan_s(v * chunk.fwd_s, v * chunk.bwd_s, s_count, m, v)
    bubble = 1.0 - m * per_device_s / pipeline_s if pipeline_s > 0 else 0.0
    return _timeline(chunks, s_count, v, m, schedule, orders, sync, opt, makespan_s=pipeline_s,
                     pipeline_s=pipeline_s, bubble=bubble, busy=(m * per_device_s,) * s_count,
                     events=())


def _timeline(chunks: Sequence[StageTiming], s_count: int, v: int, m: int, schedule: str,
              orders: list[list[tuple[bool, int, int]]], sync: list[float], opt: list[float],
              *, makespan_s: float, pipeline_s: float, bubble: float,
              busy: tuple[float, ...], events: Sequence[Event]) -> Timeline:
    """The Timeline both paths return: their results plus the inputs it is rebuilt from."""
    return Timeline(
        makespan_s=makespan_s,
        bubble_fraction=bubble,
        busy_s=busy,
        events=tuple(events),
        max_inflight=_max_inflights(s_count, v, m, schedule),
        pipeline_s=pipeline_s,
        num_devices=s_count,
        num_chunks=len(chunks),
        microbatches=m,
        schedule=schedule,
        virtual_stages=v,
        chunks=tuple(chunks),
        dp_sync_s=tuple(sync),
        optimizer_s=tuple(opt),
    )


def _per_device(values: Sequence[float] | None, s_count: int, name: str) -> list[float]:
    if values is None:
        return [0.0] * s_count
    if len(values) != s_count or any(x < 0 for x in values):
        raise ValueError(f"{name} needs {s_count} values ≥ 0 (one per device), got {list(values)}")
    return [float(x) for x in values]


@lru_cache(maxsize=4096)
def _times(chunks: tuple[StageTiming, ...], s_count: int, v: int, m: int,
           schedule: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`pipeline_times`, kept: the ops' times do not depend on the tails after the last op
    (the DP sync and optimizer step), so the ZeRO stages and shard splits the search prices
    for one layout share them (bench-64: 311 simulations, 118 distinct pipelines)."""
    free, busy = pipeline_times(chunks, s_count, v, m, schedule)
    return tuple(free), tuple(busy)


@lru_cache(maxsize=256)
def _max_inflights(s_count: int, v: int, m: int, schedule: str) -> tuple[int, ...]:
    """Per device, the most micro-batches in flight: a function of the schedule's shape alone
    (`device_orders` is cached on the same key), so every estimate of that shape shares it."""
    return tuple(_max_inflight(o) for o in device_orders(s_count, v, m, schedule))


def _max_inflight(order: list[tuple[bool, int, int]]) -> int:
    held = peak = 0
    for backward, _, _ in order:
        if backward:
            held -= 1
        else:
            held += 1
            peak = max(peak, held)
    return peak
