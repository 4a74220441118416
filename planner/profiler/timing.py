"""Timing one operation on a device: warm up, repeat, keep the median.

CUDA kernels run asynchronously, so each timed call is fenced by a device synchronisation on
both sides; the median of the repeats ignores the odd slow call (allocator growth, a clock
boost change). `clock` and `sync` are injectable so the harness itself can be tested without
a device or real time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["device_sync", "time_median_s"]


def device_sync(device: torch.device) -> Callable[[], None]:
    """A function that waits for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_median_s(op: Callable[[Any], Any], *, setup: Callable[[], Any] = lambda: None,
                  warmup: int, repeats: int, sync: Callable[[], None],
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of `op(setup())` over `repeats` timed calls after `warmup` untimed ones.

    `setup` runs before every call, outside the timed region (e.g. a forward pass whose
    backward is the op being timed)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    samples = []
    for i in range(warmup + repeats):
        arg = setup()
        sync()
        start = clock()
        op(arg)
        sync()
        elapsed = clock() - start
        if i >= warmup:
            samples.append(elapsed)
    return statistics.median(samples)
