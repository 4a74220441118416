"""`hetplan whatif MODEL CLUSTER --add "8 H100-SXM5-80GB" --remove v100 --price a100=1.2`.

Plans the model on the cluster as it is and as edited (see `planner.report.scenario` for the
edit syntax and defaults), and prints both side by side with the change in %.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table

from planner.cli.main import app
from planner.cli.options import (
    CalibrationOption,
    FrameworkOption,
    ProfilesOption,
    SeqLenOption,
    finite_option,
    load_profiles,
    parse_seq_len,
    use_calibration,
)
from planner.cli.output import console, print_json
from planner.cli.progress import spinner
from planner.limits import MAX_GLOBAL_BATCH

__all__ = ["whatif"]


@app.command()
def whatif(
    model: Annotated[str, typer.Argument(help="Model: zoo name, YAML or config.json.")],
    cluster: Annotated[str, typer.Argument(help="Cluster: name or YAML file.")],
    add: Annotated[list[str] | None, typer.Option(
        "--add", help='Add GPUs: "8 H100-SXM5-80GB" or "2x8 A100" (nodes x GPUs).')] = None,
    remove: Annotated[list[str] | None, typer.Option(
        "--remove", help="Remove a node group by name, or all groups of a GPU type.")] = None,
    price: Annotated[list[str] | None, typer.Option(
        "--price", help="Set USD per GPU-hour of a group or GPU type: a100=1.2.")] = None,
    partition: Annotated[list[str] | None, typer.Option(
        "--partition", help='Split a GPU type into MIG slices: "A100-SXM4-80GB:1g.10gb".')
    ] = None,
    network_gbps: Annotated[float | None, typer.Option(
        "--network-gbps", min=0.001, max=1e6, callback=finite_option,
        help="Node network (Gbit/s) of added groups.")] = None,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", min=1, max=MAX_GLOBAL_BATCH,
        help="Sequences per iteration (default: the model file's).")] = None,
    objective: Annotated[str, typer.Option(
        "--objective", help="throughput | cost")] = "throughput",
    framework: FrameworkOption = None,
    calibration: CalibrationOption = None,
    profiles: ProfilesOption = None,
    seq_len: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Plan before and after editing the cluster: what changes, and by how much."""
    import planner
    from planner.costing.framework import framework_named
    from planner.errors import HetplanError
    from planner.report.plan_view import batch_text
    from planner.report.whatif import whatif as run_whatif
    from planner.report.whatif import whatif_lines

    use_calibration(calibration)
    fw = framework_named(framework)
    measured = load_profiles(profiles)
    if not (add or remove or price or partition):
        raise HetplanError("whatif: nothing to change; give --add, --remove, --price or "
                           "--partition "
                           "(e.g. --add \"8 H100-SXM5-80GB\")")
    graph = planner.load_model(model, seq_len=parse_seq_len(seq_len))
    base = planner.load_cluster(cluster)
    with spinner(f"planning before and after on {base.name}", enabled=not json_out):
        w = run_whatif(graph, base, add=add or (), remove=remove or (), price=price or (),
                       network_gbps=network_gbps, partition=partition or (),
                       global_batch_size=global_batch,
                       objective=objective, framework=fw, profiles=measured)
    if json_out:
        print_json(w.to_dict())
        return
    for line in w.edits:
        console.print(f"• {line}")
    table = Table(title=f"{getattr(graph, 'name', model)} on {base.name}: before → after",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("", "before", "after", "change"):
        table.add_column(name, justify="left" if not name else "right")
    for name, before, after, pct in whatif_lines(w):
        change = "" if pct is None else f"{pct:+.1f}%"
        style = ""
        if pct and not name.endswith(" used"):  # more or fewer GPUs is neither good nor bad
            style = "green" if _better(name, pct) else "red"
        table.add_row(name, before, after, f"[{style}]{change}[/]" if style else change)
    console.print(table)
    gbs = w.before.global_batch_size or w.after.global_batch_size
    console.print(batch_text(graph.seq_len, gbs) if gbs else f"seq_len {graph.seq_len:,}")
    d = w.to_dict()
    console.print(f"before: {d['layout_before'] or w.before.problem}")
    console.print(f"after:  {d['layout_after'] or w.after.problem}")


def _better(metric: str, pct: float) -> bool:
    # Lower is better for time and money; higher for throughput and utilisation.
    lower = metric.startswith(("iteration", "$"))
    return pct < 0 if lower else pct > 0
