"""`hetplan calibrate RUNS.csv --out cal.yaml`: refit this cluster's GPU efficiency scales.

RUNS.csv: columns `plan` (a plan JSON written by `hetplan plan -o`, relative to the CSV) and
`measured_iteration_s`; JSON lines with the same keys also work. Prints predicted vs measured
before and after the fit, and says so when the constants cannot absorb the measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.cli.main import app
from planner.cli.options import FrameworkOption
from planner.cli.output import console, print_json
from planner.errors import HetplanError
from planner.outfile import check_output

__all__ = ["calibrate"]

ABSORBED_PCT = 10.0
"""Residual rms error above which the fit is reported as not absorbing the measurements."""


@app.command()
def calibrate(
    runs_file: Annotated[Path, typer.Argument(help="RUNS.csv: plan, measured_iteration_s.")],
    out: Annotated[Path, typer.Option("--out", help="Calibration YAML to write.")],
    framework: FrameworkOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Refit one achievable-efficiency scale per GPU type from measured iteration times."""
    from planner.costing.calibrate import (
        SCALE_BOUNDS,
        fit,
        load_runs,
        scales_at_bound,
        write_calibration,
    )

    check_output(out, "--out")  # before the fit, not after it
    runs = load_runs(runs_file)
    result = fit(runs, framework)
    pinned = scales_at_bound(result.scales)
    if pinned:
        # A scale at the search's bound is a clamp, not a fit: writing it would calibrate
        # later estimates with a number the runs do not support.
        shown = ", ".join(f"{n} at {result.scales[n]:g}" for n in pinned)
        raise HetplanError(f"{runs_file}: the efficiency scale of {shown} stopped at the fit's "
                           f"bound [{SCALE_BOUNDS[0]:g}, {SCALE_BOUNDS[1]:g}] (rms error "
                           f"{result.rms_after_pct:.1f} % there): efficiency is not what "
                           "separates these runs from the model; check that the times are "
                           "seconds per iteration of these plans; nothing written")
    write_calibration(out, result, runs_file)
    absorbed = result.rms_after_pct <= ABSORBED_PCT
    worst = max(range(len(runs)),
                key=lambda i: abs(result.after_s[i] / runs[i].measured_s - 1))
    worst_pct = 100 * (result.after_s[worst] / runs[worst].measured_s - 1)
    if json_out:
        print_json({"scales": result.scales, "rms_error_before_pct": result.rms_before_pct,
                    "rms_error_after_pct": result.rms_after_pct, "absorbed": absorbed,
                    "rows": [{"where": r.where, "measured_s": r.measured_s,
                              "before_s": b, "after_s": a}
                             for r, b, a in zip(runs, result.before_s, result.after_s,
                                                strict=True)],
                    "out": str(out)})
        return
    t = Table(title=f"calibration on {runs_file}")
    for col in ("run", "measured s", "before s", "error", "after s", "error"):
        t.add_column(col)
    for r, b, a in zip(runs, result.before_s, result.after_s, strict=True):
        t.add_row(r.where, f"{r.measured_s:.4g}", f"{b:.4g}",
                  f"{100 * (b / r.measured_s - 1):+.1f} %", f"{a:.4g}",
                  f"{100 * (a / r.measured_s - 1):+.1f} %")
    console.print(t)
    scales = ", ".join(f"{k} × {v:g}" for k, v in result.scales.items())
    console.print(f"efficiency scales: {scales}; rms error {result.rms_before_pct:.1f} % → "
                  f"{result.rms_after_pct:.1f} %; wrote {out}")
    if not absorbed:
        console.print(f"the fitted constants cannot absorb these measurements: residual rms "
                      f"{result.rms_after_pct:.1f} % (worst {runs[worst].where}: "
                      f"{worst_pct:+.1f} %); check for contradictory rows or a cost the plan "
                      "does not contain")
