"""The order in which each device runs its forward and backward ops, per schedule.

An op is `(is_backward, microbatch, chunk)`. Orders follow Megatron-LM's schedules
(`megatron/core/pipeline_parallel/schedules.py`): GPipe runs all forwards then all backwards;
1F1B warms up with S−s−1 forwards on stage s, alternates one forward and one backward, then
cools down; interleaved 1F1B walks micro-batches in groups of S per model chunk.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["SCHEDULES", "device_ops", "device_orders"]

SCHEDULES = ("1f1b", "gpipe", "interleaved")

Op = tuple[bool, int, int]


@lru_cache(maxsize=256)
def device_orders(num_devices: int, virtual_stages: int, microbatches: int,
                  schedule: str) -> tuple[tuple[Op, ...], ...]:
    """Per device, its ops in run order (cached: the estimate asks for the same shapes
    repeatedly). Raises ValueError for an unsupported shape."""
    s_count, v, m = num_devices, virtual_stages, microbatches
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if m < 1 or s_count < 1 or v < 1:
        raise ValueError(f"need ≥ 1 micro-batch, device and chunk; got m={m}, S={s_count}, V={v}")
    if v > 1 and schedule != "interleaved":
        raise ValueError(f"virtual_stages is {v} but schedule is {schedule!r}; "
                         "use schedule 'interleaved' or virtual_stages 1")
    if schedule == "interleaved" and v > 1 and m % s_count:
        raise ValueError(f"interleaved schedule needs micro-batches ({m}) divisible by the "
                         f"pipeline stages ({s_count}), as Megatron-LM does; use "
                         f"{(m // s_count + 1) * s_count} micro-batches or schedule '1f1b'")
    return tuple(tuple(device_ops(s, s_count, v, m, schedule)) for s in range(s_count))


def device_ops(s: int, s_count: int, v: int, m: int, schedule: str,
               warmup_extra: int = 0) -> list[Op]:
    """Device s's ops. Forwards walk micro-batches in groups of S, each group through chunk 0,
    then chunk 1, ... (a last group may be short); backwards walk the chunks in reverse.
    `warmup_extra` adds warm-up forwards: the runtime's fallback when micro-batches do not
    divide into groups of S and Megatron's warm-up count would deadlock."""
    fwd = _order(s, s_count, v, m, backward=False)
    bwd = _order(s, s_count, v, m, backward=True)
    if schedule == "gpipe":
        return fwd + bwd
    # 1F1B (and interleaving with one chunk per device, as Megatron does): S−s−1 warm-up
    # forwards; interleaved: Megatron's (S−s−1)·2 on top of (V−1)·S.
    warmup = s_count - s - 1 if v == 1 else (s_count - s - 1) * 2 + (v - 1) * s_count
    warmup = min(warmup + warmup_extra, len(fwd))
    ops = fwd[:warmup]
    for f, b in zip(fwd[warmup:], bwd, strict=False):
        ops += [f, b]
    ops.extend(bwd[len(fwd) - warmup:])
    return ops


def _order(s: int, s_count: int, v: int, m: int, backward: bool) -> list[Op]:
    locals_ = range(v - 1, -1, -1) if backward else range(v)
    return [(backward, i, local * s_count + s)
            for start in range(0, m, s_count)
            for local in locals_
            for i in range(start, min(start + s_count, m))]
