"""The order in which each device runs its forward and backward ops, per schedule.

An op is `(is_backward, microbatch, chunk)`. Orders follow Megatron-LM's schedules
(`megatron/core/pipeline_parallel/schedules.py`): GPipe runs all forwards then all backwards;
1F1B warms up with S−s−1 forwards on stage s, alternates one forward and one backward, then
cools down; interleaved 1F1B walks micro-batches in groups of S per model chunk.
"""

from __future__ import annotations

__all__ = ["SCHEDULES", "device_orders"]

SCHEDULES = ("1f1b", "gpipe", "interleaved")

Op = tuple[bool, int, int]


def device_orders(num_devices: int, virtual_stages: int, microbatches: int,
                  schedule: str) -> list[list[Op]]:
    """Per device, its ops in run order. Raises ValueError for an unsupported shape."""
    s_count, v, m = num_devices, virtual_stages, microbatches
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if m < 1 or s_count < 1 or v < 1:
        raise ValueError(f"need ≥ 1 micro-batch, device and chunk; got m={m}, S={s_count}, V={v}")
    if v > 1 and schedule != "interleaved":
        raise ValueError(f"virtual_stages is {v} but schedule is {schedule!r}; "
                         "use schedule 'interleaved' or virtual_stages 1")
    if schedule == "gpipe":
        return [[(False, i, s) for i in range(m)] + [(True, i, s) for i in range(m)]
                for s in range(s_count)]
    if schedule == "1f1b" or v == 1:
        # Interleaving with one chunk per device is plain 1F1B (Megatron picks that function).
        return [_one_f_one_b(s, s_count, m) for s in range(s_count)]
    if m % s_count:
        raise ValueError(f"interleaved schedule needs micro-batches ({m}) divisible by the "
                         f"pipeline stages ({s_count}), as Megatron-LM does; use "
                         f"{(m // s_count + 1) * s_count} micro-batches or schedule '1f1b'")
    return [_interleaved(s, s_count, v, m) for s in range(s_count)]


def _one_f_one_b(s: int, s_count: int, m: int) -> list[Op]:
    warmup = min(s_count - s - 1, m)
    ops: list[Op] = [(False, i, s) for i in range(warmup)]
    for i in range(m - warmup):
        ops.append((False, warmup + i, s))
        ops.append((True, i, s))
    ops.extend((True, i, s) for i in range(m - warmup, m))
    return ops


def _interleaved(s: int, s_count: int, v: int, m: int) -> list[Op]:
    group = s_count * v
    total = m * v

    def op(k: int, backward: bool) -> Op:
        local = (k % group) // s_count
        if backward:
            local = v - 1 - local
        micro = (k // group) * s_count + k % s_count
        return (backward, micro, local * s_count + s)

    # Megatron: (S−s−1)·2 extra warm-up forwards on top of (V−1)·S, capped at all of them.
    warmup = min((s_count - s - 1) * 2 + (v - 1) * s_count, total)
    ops = [op(k, False) for k in range(warmup)]
    for k in range(total - warmup):
        ops.append(op(k + warmup, False))
        ops.append(op(k, True))
    ops.extend(op(k, True) for k in range(total - warmup, total))
    return ops
