"""Time the pipeline simulator on the shape the search calls most (8 stages × 32 micro-batches)."""

from __future__ import annotations

import time

from planner.simulate import StageTiming, simulate


def _time_ms(fn, repeat: int = 200) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat * 1e3)
    return best


def main() -> None:
    hetero = [StageTiming(1e-3 * (1 + 0.1 * j), 2e-3, 1e-4 if j < 7 else 0.0, j) for j in range(8)]
    uniform = [StageTiming(1e-3, 2e-3, 0.0, j) for j in range(8)]
    inter = [StageTiming(5e-4, 1e-3, 5e-5 if j < 15 else 0.0, j % 8) for j in range(16)]
    cases = [
        ("1f1b 8x32 heterogeneous, p2p, events", lambda: simulate(hetero, 32)),
        ("1f1b 8x32 heterogeneous, p2p, detail=False", lambda: simulate(hetero, 32, detail=False)),
        ("1f1b 8x32 uniform, detail=False (closed form)",
         lambda: simulate(uniform, 32, detail=False)),
        ("interleaved 8x2x32, p2p, events", lambda: simulate(inter, 32, "interleaved", 2)),
    ]
    for name, fn in cases:
        print(f"{name:48s} {_time_ms(fn):7.3f} ms")


if __name__ == "__main__":
    main()
