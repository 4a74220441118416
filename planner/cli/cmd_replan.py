"""`hetplan replan PLAN.json --remove NODE|GROUP [--add "N GPU"] [--tolerance 0.05] -o NEW.json`.

The best plan on the changed cluster that, among plans within the tolerance of the fastest,
moves the least training state (`planner.replan`); prints what moves where and the throughput
before and after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.main import app
from planner.cli.options import (
    FrameworkOption,
    ProfilesOption,
    finite_option,
    load_profiles,
)
from planner.cli.output import console, print_json
from planner.outfile import check_output

__all__ = ["replan"]


def _gib(x: float) -> str:
    return f"{x / 2**30:,.2f} GiB" if x >= 2**30 else f"{x / 2**20:,.2f} MiB"


@app.command()
def replan(
    plan_file: Annotated[str, typer.Argument(help="The plan now running (JSON).")],
    remove: Annotated[list[str] | None, typer.Option(
        "--remove", help="A node (a100-1), a node group, or a GPU type that is gone.")] = None,
    add: Annotated[list[str] | None, typer.Option(
        "--add", help='GPUs that joined: "8 H100-SXM5-80GB" or "2x8 A100".')] = None,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", min=0.0, max=10.0, callback=finite_option,
        help="Accept plans this much slower than the fastest (fraction) if "
        "they move less state.")] = 0.05,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the new plan.")] = None,
    framework: FrameworkOption = None,
    profiles: ProfilesOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Re-plan after nodes are lost or added, moving as little training state as possible."""
    from planner.cli.plan_file import load_checked
    from planner.replanning import replan as run_replan
    from planner.report.plan_view import batch_line, plan_seq_len

    if out is not None:
        check_output(out, "-o")  # before the search, not after it
    plan = load_checked(plan_file).plan  # a broken plan's error names its file
    measured = load_profiles(profiles)
    r = run_replan(plan, remove=remove or (), add=add or (), tolerance=tolerance,
                   framework=framework, profiles=measured)
    if out is not None:
        r.plan.save(out)
    if json_out:
        print_json(r.to_dict())
        return
    for line in r.edits:
        console.print(f"• {line}")
    from planner.report.plan_view import layer_ranges

    for m in r.moves:
        src = ", ".join(m.sources) if m.sources else "no surviving copy (checkpoint)"
        where = m.node if m.old_node in (None, m.node) else f"{m.node} (was {m.old_node})"
        console.print(f"move {layer_ranges([m.layers])} → {where}: "
                      f"{_gib(m.bytes)} from {src}")
    if not r.moves:
        console.print("no state moves: every node already holds its new layers")
    change = (r.tokens_per_s_after - r.tokens_per_s_before) / r.tokens_per_s_before * 100
    console.print(f"state moved {_gib(r.moved_bytes)}; tokens/s {r.tokens_per_s_before:,.0f} → "
                  f"{r.tokens_per_s_after:,.0f} ({change:+.1f} %); iteration "
                  f"{r.iteration_time_s_before:.4f} s → {r.iteration_time_s_after:.4f} s "
                  f"(fastest found {r.fastest_iteration_time_s:.4f} s)")
    seq = plan_seq_len(r.plan)  # the running plan's length: a replan never changes it
    if seq is not None:
        console.print(batch_line(r.plan, seq))
    if out is not None:
        console.print(f"wrote {out}")
