"""`hetplan demo`: plan a bundled model on a bundled mixed cluster and print the plan."""

from __future__ import annotations

import typer

from planner.cli.main import app

DEMO_MODEL = "llama3-8b"
DEMO_CLUSTER = "lab-mixed"


@app.command()
def demo(
    out: str = typer.Option("", "-o", "--out", help="Also write the plan JSON here."),
) -> None:
    """Plan llama3-8b on the bundled lab-mixed cluster (A100 + V100 + T4) and print the plan."""
    from planner.cli.cmd_plan import plan_command

    plan_command(DEMO_MODEL, DEMO_CLUSTER, out=out or None)
