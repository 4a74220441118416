"""`hetplan validate [--data-dir DIR] [--rows] [--json]`: the cost model's accuracy report.

Runs every measured plan in the public measurements shipped with hetplan
(planner/costing/validation/data, sources in its README.md), or in --data-dir, through
`estimate`, once with the analytic model alone and once with the shipped profiles, and prints
per file MAPE, Spearman rank correlation and top-1 regret (and with --rows every row).
A folder holding none of the measurement files is an error (exit 2), not an empty report.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.cli.main import app
from planner.cli.output import print_json, wide_console
from planner.cli.progress import spinner
from planner.errors import HetplanError
from planner.input_files import clip

__all__ = ["validate"]


def _fmt(x: float, pct: bool = False) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:.1f} %" if pct else f"{x:.3f}"


@app.command()
def validate(
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Folder of measurement CSVs with the shipped files' names "
        "(default: the ones shipped with hetplan).")] = None,
    rows: Annotated[bool, typer.Option("--rows", help="Print every row.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Accuracy of `estimate` on public measurements: MAPE, Spearman, top-1 regret per file."""
    from planner.costing.validation import DATA_FILES, data_files_in, default_data_dir, run_all

    folder = data_dir or default_data_dir()
    if not folder.is_dir():
        raise HetplanError(f"--data-dir {folder}: no such folder; give a folder of "
                           f"measurement CSVs ({', '.join(DATA_FILES)})")
    if not data_files_in(folder):
        raise HetplanError(f"--data-dir {folder}: holds none of the measurement files "
                           f"{', '.join(DATA_FILES)}; nothing to validate")
    try:
        with spinner("validating the cost model", enabled=not json_out) as step:
            results = run_all(folder, progress=step)
    except (OSError, ValueError, KeyError, IndexError, csv.Error) as exc:
        # The files are the user's (--data-dir): a malformed one is bad input, not a bug.
        raise HetplanError(f"--data-dir {folder}: a measurement file cannot be read "
                           f"({clip(f'{type(exc).__name__}: {exc}', 200)})") from None
    if json_out:
        print_json({mode: [r.to_dict() for r in reps] for mode, reps in results.items()})
        return
    out = wide_console(150)  # file names and targets are not cut
    for mode, reps in results.items():
        t = Table(title=f"accuracy ({mode})")
        for col in ("file", "group", "rows", "quantity", "MAPE", "Spearman", "top-1 regret",
                    "target"):
            t.add_column(col)
        for r in reps:
            t.add_row(r.file, r.group, str(r.counted), r.quantity, _fmt(r.mape_pct, True),
                      _fmt(r.spearman), _fmt(r.top1_regret_pct, True), r.target)
        out.print(t)
        if rows:
            for r in reps:
                rt = Table(title=f"{r.file} [{r.group}] ({mode})")
                for col in ("row", "measured", "predicted", "error", "note"):
                    rt.add_column(col)
                for x in r.rows:
                    err = ("-" if x.measured is None or x.predicted is None
                           else f"{100 * (x.predicted - x.measured) / x.measured:+.1f} %")
                    rt.add_row(x.label, "-" if x.measured is None else f"{x.measured:g}",
                               "-" if x.predicted is None else f"{x.predicted:.4g}", err,
                               ("" if x.used else "not counted: ") + x.note)
                out.print(rt)
