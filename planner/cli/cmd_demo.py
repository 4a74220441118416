"""`hetplan demo`: plan a bundled model on a bundled mixed cluster and print the plan."""

from __future__ import annotations

import typer

from planner.cli.main import app

DEMO_MODEL = "llama3-8b"
DEMO_CLUSTER = "lab-mixed"


@app.command()
def demo(
    out: str = typer.Option("", "-o", "--output", help="Also write the plan JSON here."),
) -> None:
    """Plan llama3-8b on the bundled lab-mixed cluster (A100 + V100 + T4) and print the plan."""
    from planner.cli.cmd_plan import plan

    plan(DEMO_MODEL, DEMO_CLUSTER, output=out or None, global_batch=None, objective="throughput",
         budget_usd_per_hour=None, top_k=5, sequence_parallel=False, json_out=False)
