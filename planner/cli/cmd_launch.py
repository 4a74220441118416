"""`hetplan launch PLAN.json [--out-dir DIR]`: one torchrun script per node, plus the rank map."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.cli.main import app
from planner.cli.output import console, print_json
from planner.cli.plan_file import load_checked, refuse_infeasible

__all__ = ["launch"]


@app.command()
def launch(
    plan_file: Annotated[Path, typer.Argument(help="A plan JSON (from `hetplan plan -o`).")],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the scripts go.")] = Path(
        "launch"),
    cluster: Annotated[str | None, typer.Option(
        "--cluster", help="The cluster to run on (name or YAML); the plan is checked against "
        "it (default: the cluster the plan embeds).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Write one torchrun script per node (and ranks.tsv) for a plan."""
    from planner.costing.framework import framework_of
    from planner.runtime.launch import write_scripts

    checked = load_checked(plan_file, cluster)
    refuse_infeasible(checked, "launch")
    plan = checked.plan
    if cluster is not None:
        # The scripts' plan.json describes the cluster it runs on.
        plan = plan.model_copy(update={"cluster": checked.cluster.spec})
    priced = framework_of(plan.predicted)
    if priced != "hetplan":
        # stderr, one line: the scripts still work, but the predictions describe another runtime.
        typer.echo(f"warning: {plan_file} was priced for {priced}; these scripts run hetplan's "
                   "runtime, so expect `hetplan estimate --framework hetplan`'s figures",
                   err=True)
    scripts = write_scripts(plan, out_dir)
    if json_out:
        print_json({"out_dir": str(out_dir), "world_size": len(plan.ranks), "nodes": [
            {"node": s.node, "node_rank": s.node_rank, "nproc_per_node": s.nproc,
             "script": str(out_dir / s.filename), "plan_ranks": list(s.plan_ranks),
             "torch_ranks": list(s.torch_ranks)} for s in scripts]})
        return
    table = Table(title=f"launch scripts in {out_dir}/ (world size {len(plan.ranks)})")
    for col in ("node rank", "node", "procs", "plan ranks", "script"):
        table.add_column(col)
    for s in scripts:
        table.add_row(str(s.node_rank), s.node, str(s.nproc), _ranges(s.plan_ranks),
                      s.filename)
    console.print(table)
    console.print(f"copy {out_dir}/ to every node, then on each: ./<node>.sh MASTER_ADDR "
                  "[MASTER_PORT] [STEPS]  (MASTER_ADDR: node rank 0's address)")


def _ranges(ranks: tuple[int, ...]) -> str:
    parts, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            a, b = ranks[start], ranks[i - 1]
            parts.append(str(a) if a == b else f"{a}-{b}")
            start = i
    return ",".join(parts)
