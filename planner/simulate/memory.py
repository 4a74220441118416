"""Peak activation memory per device when a device's chunks hold different amounts."""

from __future__ import annotations

from collections.abc import Sequence

from planner.simulate.timeline import Timeline

__all__ = ["peak_activation"]


def peak_activation(timeline: Timeline, per_chunk: Sequence[float]) -> tuple[float, ...]:
    """Per device, the peak of Σ per_chunk[c] over the (micro-batch, chunk) pairs held.

    `per_chunk[c]` is what one micro-batch leaves stored on chunk c (bytes, GiB: any unit).
    A pair is held from its forward's start to its backward's end, as in `max_inflight`;
    with equal chunks per device this is max_inflight × the chunk's amount.
    """
    if len(per_chunk) != timeline.num_chunks:
        raise ValueError(f"need {timeline.num_chunks} per-chunk amounts, got {len(per_chunk)}")
    held = [0.0] * timeline.num_devices
    peak = [0.0] * timeline.num_devices
    for e in timeline.events:
        if e.kind == "fwd":
            held[e.device] += per_chunk[e.chunk]
            peak[e.device] = max(peak[e.device], held[e.device])
        elif e.kind == "bwd":
            held[e.device] -= per_chunk[e.chunk]
    return tuple(peak)
