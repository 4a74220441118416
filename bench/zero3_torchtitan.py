"""ZeRO-3 against torchtitan's published FSDP2 runs (torchtitan_a100.csv and
torchtitan_h100.csv in planner/costing/validation/data: torchtitan's own benchmark tables,
whose FSDP2 shards parameters, gradients and optimizer state over the DP group, i.e. ZeRO-3).

    .venv/bin/python bench/zero3_torchtitan.py

`hetplan validate` prices these rows at ZeRO-3 with overlapped DP traffic (and reports the
H100 file's published peaks). This probe prices the same rows at `zero: 1` and `zero: 3` and
prints throughput per GPU and the memory verdict under both: every one of these runs ran, so
a correct memory model calls them all feasible at ZeRO-3.
"""

from __future__ import annotations

from typing import Any

import planner.costing.validation.large_runs as lr
from cost_models.profiles import default_profiles
from planner.costing.validation import default_data_dir

DATA = default_data_dir()
_megatron_plan = lr.megatron_plan


def _rows(zero: int) -> dict[tuple[str, str], Any]:
    def plan_at(*args: Any, **kwargs: Any) -> Any:
        kwargs["zero"] = zero  # only torchtitan's rows are priced here
        return _megatron_plan(*args, **kwargs)

    lr.megatron_plan = plan_at
    try:
        return {(name, row.label): row
                for name, h100 in (("torchtitan_a100.csv", False), ("torchtitan_h100.csv", True))
                for row in lr._torchtitan(DATA / name, default_profiles(), h100)[0]}
    finally:
        lr.megatron_plan = _megatron_plan


def main() -> None:
    z1, z3 = _rows(1), _rows(3)
    err1, err3, fits1, fits3 = [], [], 0, 0
    for key, a in z1.items():
        b = z3[key]
        if a.predicted is None or not a.used or a.measured is None:
            continue
        e1, e3 = a.predicted / a.measured - 1, b.predicted / b.measured - 1
        err1.append(abs(e1))
        err3.append(abs(e3))
        fits1 += a.feasible
        fits3 += b.feasible
        print(f"{key[1][:55]:55s} measured {a.measured:8.1f}  zero1 {100 * e1:+6.1f} % "
              f"fits {a.feasible!s:5}  zero3 {100 * e3:+6.1f} % fits {b.feasible}")
    n = len(err1)
    print(f"{n} rows: MAPE zero1 {100 * sum(err1) / n:.1f} %, zero3 {100 * sum(err3) / n:.1f} %;"
          f" called feasible: zero1 {fits1}/{n}, zero3 {fits3}/{n}")


if __name__ == "__main__":
    main()
