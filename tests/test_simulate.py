"""Pipeline simulator: closed forms (Narayanan et al. 2021 §2.2), a recursive oracle, memory."""

from __future__ import annotations

import functools
import random

import pytest

from planner.simulate import (
    StageTiming,
    device_orders,
    peak_activation,
    simulate,
    uniform_bubble_fraction,
    uniform_makespan_s,
    with_events,
)


def _uniform(s: int, v: int, f: float = 1.0, b: float = 2.0) -> list[StageTiming]:
    return [StageTiming(f / v, b / v, 0.0, j % s) for j in range(s * v)]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("s", "m"), [(1, 1), (1, 5), (2, 2), (3, 7), (4, 8), (5, 5), (8, 32)])
def test_uniform_matches_closed_form(schedule: str, s: int, m: int) -> None:
    f, b = 1.5, 3.25
    t = simulate(_uniform(s, 1, f, b), m, schedule)
    assert t.makespan_s == pytest.approx((m + s - 1) * (f + b), rel=1e-12)
    assert t.bubble_fraction == pytest.approx((s - 1) / (m + s - 1), abs=1e-12)
    assert t.busy_s == pytest.approx([m * (f + b)] * s)


@pytest.mark.parametrize(("s", "v", "m"), [(2, 2, 2), (2, 4, 4), (4, 2, 4), (4, 2, 8), (4, 3, 8),
                                           (8, 2, 32), (8, 4, 8), (3, 2, 9)])
def test_interleaved_bubble_is_one_over_v(s: int, v: int, m: int) -> None:
    f, b = 1.0, 2.0
    t = simulate(_uniform(s, v, f, b), m, "interleaved", v)
    ideal = m * (f + b)
    # Narayanan et al. 2021 §2.2: bubble time fraction (S − 1)/(V·m) of the ideal time.
    assert (t.makespan_s - ideal) / ideal == pytest.approx((s - 1) / (v * m), rel=1e-9)
    assert t.makespan_s == pytest.approx(uniform_makespan_s(f, b, s, m, v), rel=1e-12)
    assert t.bubble_fraction == pytest.approx(uniform_bubble_fraction(s, m, v), rel=1e-9)


@pytest.mark.parametrize(("schedule", "s", "v", "m"), [("1f1b", 4, 1, 9), ("gpipe", 3, 1, 4),
                                                       ("interleaved", 4, 2, 8)])
def test_fast_path_equals_simulation(schedule: str, s: int, v: int, m: int) -> None:
    full = simulate(_uniform(s, v), m, schedule, v)
    fast = simulate(_uniform(s, v), m, schedule, v, detail=False)
    assert fast.events == ()
    assert fast.makespan_s == pytest.approx(full.makespan_s, rel=1e-12)
    assert fast.bubble_fraction == pytest.approx(full.bubble_fraction, abs=1e-12)
    assert fast.busy_s == pytest.approx(full.busy_s)
    assert fast.max_inflight == full.max_inflight


def _oracle_finish(chunks: list[StageTiming], m: int, schedule: str, v: int) -> dict:
    """Earliest finish of every op by memoised recursion over the dependency DAG."""
    s_count = len(chunks) // v
    orders = device_orders(s_count, v, m, schedule)
    prev: dict[tuple, tuple | None] = {}
    for order in orders:
        for k, op in enumerate(order):
            prev[op] = order[k - 1] if k else None

    # A link between chunk c and c + 1 carries one micro-batch at a time per direction, in
    # micro-batch order: a transfer starts when its tensor exists and the previous one arrived.
    @functools.cache
    def act_arrives(i: int, c: int) -> float:
        start = end((False, i, c))
        if i > 0:
            start = max(start, act_arrives(i - 1, c))
        return start + chunks[c].send_s

    @functools.cache
    def grad_arrives(i: int, c: int) -> float:  # from chunk c + 1 to chunk c
        start = end((True, i, c + 1))
        if i > 0:
            start = max(start, grad_arrives(i - 1, c))
        return start + chunks[c].send_s

    @functools.cache
    def end(op: tuple) -> float:
        backward, i, c = op
        before = prev[op]
        ready = end(before) if before else 0.0
        if backward:
            ready = max(ready, end((False, i, c)))
            if c + 1 < len(chunks):
                ready = max(ready, grad_arrives(i, c))
            return ready + chunks[c].bwd_s
        if c > 0:
            ready = max(ready, act_arrives(i, c - 1))
        return ready + chunks[c].fwd_s

    return {op: end(op) for op in prev}


def _random_case(rng: random.Random) -> tuple[list[StageTiming], int, str, int]:
    schedule = rng.choice(["1f1b", "gpipe", "interleaved"])
    s = rng.randint(1, 5)
    v = rng.randint(2, 3) if schedule == "interleaved" else 1
    m = s * rng.randint(1, 3) if schedule == "interleaved" else rng.randint(s, s + 4)
    chunks = []
    for j in range(s * v):
        bwd = rng.uniform(0.5, 3.0)
        chunks.append(StageTiming(rng.uniform(0.2, 2.0), bwd,
                                  0.0 if j == s * v - 1 else rng.uniform(0.0, 0.5), j % s,
                                  recompute_s=rng.choice([0.0, bwd / 3])))
    return chunks, m, schedule, v


@pytest.mark.parametrize("seed", range(40))
def test_random_heterogeneous_respects_dependencies(seed: int) -> None:
    chunks, m, schedule, v = _random_case(random.Random(seed))
    t = simulate(chunks, m, schedule, v)
    fwd = {(e.microbatch, e.chunk): e for e in t.events if e.kind == "fwd"}
    bwd = {(e.microbatch, e.chunk): e for e in t.events if e.kind == "bwd"}
    rec = {(e.microbatch, e.chunk): e for e in t.events if e.kind == "recompute"}
    n = len(chunks)
    assert set(fwd) == set(bwd) == {(i, c) for i in range(m) for c in range(n)}
    for (i, c), e in fwd.items():
        assert e.device == c % (n // v)
        assert e.end_s - e.start_s == pytest.approx(chunks[c].fwd_s)
        if c > 0:
            assert e.start_s >= fwd[i, c - 1].end_s + chunks[c - 1].send_s - 1e-12
    for (i, c), e in bwd.items():
        start = rec[i, c].start_s if (i, c) in rec else e.start_s
        assert e.end_s - start == pytest.approx(chunks[c].bwd_s)
        assert start >= fwd[i, c].end_s - 1e-12
        if c + 1 < n:
            assert start >= bwd[i, c + 1].end_s + chunks[c].send_s - 1e-12
    for d in range(n // v):
        spans = sorted((e.start_s, e.end_s) for e in t.events
                       if e.device == d and e.kind in ("fwd", "bwd", "recompute"))
        for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False):
            assert b_start >= a_end - 1e-12, f"device {d} runs two ops at once"
    # Every op starts as early as its device and inputs allow: the DAG's longest path.
    oracle = _oracle_finish(chunks, m, schedule, v)
    for (i, c), e in fwd.items():
        assert e.end_s == pytest.approx(oracle[False, i, c], rel=1e-12)
    for (i, c), e in bwd.items():
        assert e.end_s == pytest.approx(oracle[True, i, c], rel=1e-12)
    assert t.makespan_s == pytest.approx(max(oracle.values()), rel=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_sends_follow_their_ops(seed: int) -> None:
    chunks, m, schedule, v = _random_case(random.Random(100 + seed))
    t = simulate(chunks, m, schedule, v)
    ends = {(e.kind, e.microbatch, e.chunk): e.end_s for e in t.events}
    sends = {(e.kind, e.microbatch, e.chunk): e for e in t.events
             if e.kind in ("send", "send_grad")}
    for (kind, i, c), e in sends.items():
        op = "fwd" if kind == "send" else "bwd"
        # On the wire once the tensor exists and the link has delivered micro-batch i − 1.
        link_free = sends[kind, i - 1, c].end_s if i > 0 else 0.0
        assert e.start_s == pytest.approx(max(ends[op, i, c], link_free), abs=1e-12)
        link = c if kind == "send" else c - 1
        assert e.end_s - e.start_s == pytest.approx(chunks[link].send_s)


def test_max_inflight_one_f_one_b_and_gpipe() -> None:
    for s, m in [(4, 8), (4, 2), (6, 6)]:
        t = simulate(_uniform(s, 1), m, "1f1b")
        assert t.max_inflight == tuple(min(s - d, m) for d in range(s))
        assert simulate(_uniform(s, 1), m, "gpipe").max_inflight == (m,) * s


def test_max_inflight_interleaved_megatron_formula() -> None:
    s, v, m = 4, 2, 8
    t = simulate(_uniform(s, v), m, "interleaved", v)
    # Korthikanti et al. 2022 / Megatron: V·S + S − 1 − 2s chunk-activations on device s.
    assert t.max_inflight == tuple(v * s + s - 1 - 2 * d for d in range(s))
    # In stage units device 0 holds S·(1 + (S−1)/(S·V)) micro-batches' activations.
    assert t.max_inflight[0] / v == pytest.approx(s * (1 + (s - 1) / (s * v)))


@pytest.mark.parametrize("seed", range(10))
def test_max_inflight_equals_count_over_time(seed: int) -> None:
    chunks, m, schedule, v = _random_case(random.Random(200 + seed))
    t = simulate(chunks, m, schedule, v)
    starts = {(e.microbatch, e.chunk): e.start_s for e in t.events if e.kind == "fwd"}
    ends = {(e.microbatch, e.chunk): e.end_s for e in t.events if e.kind == "bwd"}
    s_count = len(chunks) // v
    for d in range(s_count):
        mine = [k for k in starts if k[1] % s_count == d]
        # Held on [fwd start, bwd end); the peak is reached at some forward's start.
        peak = max(sum(1 for k in mine if starts[k] <= starts[x] < ends[k]) for x in mine)
        assert t.max_inflight[d] == peak
        weights = [1.0 + c for c in range(len(chunks))]
        bytes_peak = max(sum(weights[k[1]] for k in mine if starts[k] <= starts[x] < ends[k])
                         for x in mine)
        assert peak_activation(t, weights)[d] == pytest.approx(bytes_peak)


def test_tail_hand_computed() -> None:
    # S=2, m=2, f=b=1: device 0 ends its backwards at 6, device 1 at 5.
    chunks = _uniform(2, 1, 1.0, 1.0)
    assert simulate(chunks, 2).makespan_s == 6.0
    assert simulate(chunks, 2, dp_sync_s=[1.5, 1.5]).makespan_s == 7.5
    t = simulate(chunks, 2, dp_sync_s=[0.0, 2.5], optimizer_s=[0.25, 0.25])
    assert t.makespan_s == 7.75
    assert t.pipeline_s == 6.0
    assert [(e.kind, e.start_s) for e in t.events if e.device == 1 and e.microbatch < 0] == [
        ("dp_sync", 5.0), ("optimizer", 7.5)]


def test_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"divisible by the pipeline stages \(4\)"):
        simulate(_uniform(4, 2), 6, "interleaved", 2)
    with pytest.raises(ValueError, match="must run on device 1"):
        simulate([StageTiming(1, 1, 0, 0), StageTiming(1, 1, 0, 0)], 2)
    with pytest.raises(ValueError, match="unknown schedule"):
        simulate(_uniform(2, 1), 2, "zb")
    with pytest.raises(ValueError, match="virtual_stages is 2"):
        simulate(_uniform(2, 2), 2, "1f1b", 2)


@pytest.mark.parametrize("seed", range(5))
def test_with_events_redoes_a_numbers_only_run(seed: int) -> None:
    chunks, m, schedule, v = _random_case(random.Random(300 + seed))
    s_count = len(chunks) // v
    tail = {"dp_sync_s": [0.1 * d for d in range(s_count)], "optimizer_s": [0.05] * s_count}
    quick = simulate(chunks, m, schedule, v, detail=False, **tail)
    full = simulate(chunks, m, schedule, v, **tail)
    assert quick.events == () and quick.makespan_s == full.makespan_s
    assert with_events(quick) == full
    assert with_events(full) is full


def test_a_slow_link_carries_one_microbatch_at_a_time() -> None:
    """GPipe, 2 stages, forward 1 s, backward 1 s, 3 s per transfer, 4 micro-batches: the link,
    not the compute, paces the second stage. Activations leave at 1, 2, 3, 4 s but the link
    delivers one every 3 s: arrivals 4, 7, 10, 13; the second stage's last forward ends at
    14 s (a pure delay would say 8 s)."""
    chunks = [StageTiming(1.0, 1.0, 3.0, 0), StageTiming(1.0, 1.0, 0.0, 1)]
    t = simulate(chunks, 4, "gpipe")
    fwd1 = sorted(e.end_s for e in t.events if e.kind == "fwd" and e.chunk == 1)
    assert fwd1 == [5.0, 8.0, 11.0, 14.0]
    # Backward of stage 1 runs 14-18; gradients reach stage 0 at 18, 21, 24, 27 (the link
    # again); stage 0's last backward ends at 28.
    assert t.pipeline_s == pytest.approx(28.0)


def test_one_f_one_b_with_fewer_microbatches_than_stages_is_legal() -> None:
    # Megatron / DeepSpeed run it: warm-up min(S − s − 1, m) forwards, so with m < S every
    # stage runs all forwards then all backwards; uniform stages give (m + S − 1)(f + b),
    # the pipeline closed form (Narayanan et al. 2021 §2.2).
    for s, m in [(4, 1), (4, 2), (8, 3)]:
        t = simulate(_uniform(s, 1), m, "1f1b")
        assert t.pipeline_s == pytest.approx((m + s - 1) * 3.0)
        assert t.max_inflight == tuple(min(s - d, m) for d in range(s))
