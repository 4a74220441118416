"""The run log `hetplan calibrate` reads: one JSON line per training step, written on rank 0.

Each line: {"plan": PLAN.json as given, "step": n, "measured_iteration_s": seconds,
"warmup": true for the first step (CUDA and NCCL start-up; calibrate skips it)}. The runtime
times whole iterations (device-synchronised); per-stage times are not measured.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from planner.errors import HetplanError

__all__ = ["append_run_log"]


def append_run_log(path: str | Path, plan: str | Path, times_s: Sequence[float]) -> None:
    """Append one line per step to `path` (created if missing). A log grows run by run, so
    it is appended to rather than replaced whole like the other outputs."""
    text = "".join(json.dumps({"plan": str(plan), "step": i + 1, "measured_iteration_s": t,
                               "warmup": i == 0}, sort_keys=True) + "\n"
                   for i, t in enumerate(times_s))
    try:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise HetplanError(f"--run-log {path}: cannot append ({exc.strerror or exc})") from None
