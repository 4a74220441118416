"""`hetplan whatif MODEL CLUSTER --add "8 H100-SXM5-80GB" --remove v100 --price a100=1.2`.

Plans the model on the cluster as it is and as edited (see `planner.report.scenario` for the
edit syntax and defaults), and prints both side by side with the change in %. `--price` applies
to both sides, so the $ columns compare; `--plot` draws the two, `--save-cluster` keeps the
edited cluster as a YAML file every command reads.
"""

from __future__ import annotations

from pathlib import Path
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
    note_calibration_gpus,
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
        "--price", help="USD per GPU-hour of a group or GPU type, a100=1.2 (before and "
        "after alike).")] = None,
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
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Before/after bars of tokens/s and $ per 1M tokens (.png or .svg).")
    ] = None,
    save_cluster: Annotated[Path | None, typer.Option(
        "--save-cluster", help="Write the edited cluster as a cluster YAML file.")] = None,
    seq_len: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Plan before and after editing the cluster: what changes, and by how much."""
    import planner
    from planner.costing.framework import framework_named
    from planner.errors import HetplanError
    from planner.report.plan_view import batch_text
    from planner.report.whatif import SAME_PRICES, whatif_lines
    from planner.report.whatif import whatif as run_whatif

    use_calibration(calibration)
    fw = framework_named(framework)
    measured = load_profiles(profiles)
    if not (add or remove or partition):
        # --price alone changes nothing: it applies to both sides so the $ columns compare.
        raise HetplanError("whatif: nothing to change; give --add, --remove or --partition "
                           "(e.g. --add \"8 H100-SXM5-80GB\"); --price applies to both sides")
    if plot is not None:
        from planner.report.figure import check_figure_path

        check_figure_path(plot, "--plot")
    if save_cluster is not None:
        from planner.outfile import check_output

        check_output(save_cluster, "--save-cluster")
    graph = planner.load_model(model, seq_len=parse_seq_len(seq_len))
    base = planner.load_cluster(cluster)
    with spinner(f"planning before and after on {base.name}", enabled=not json_out):
        w = run_whatif(graph, base, add=add or (), remove=remove or (), price=price or (),
                       network_gbps=network_gbps, partition=partition or (),
                       global_batch_size=global_batch,
                       objective=objective, framework=fw, profiles=measured)
    from planner.cluster.load import cluster_from_dict

    note_calibration_gpus([*base.gpu_counts(), *cluster_from_dict(w.cluster_after).gpu_counts()],
                          "the cluster before or after")
    title = f"{getattr(graph, 'name', model)} on {base.name}: before → after"
    if plot is not None:
        from planner.report.whatif_plot import draw_whatif

        draw_whatif(w, plot, title)
    if save_cluster is not None:
        from planner.cluster.save import write_cluster_yaml

        write_cluster_yaml(w.cluster_after, save_cluster,
                           comment=f"hetplan whatif: {base.name} edited\n"
                           + "\n".join(e for e in w.edits if e != SAME_PRICES),
                           flag="--save-cluster")
    if json_out:
        print_json(w.to_dict())
        return
    for line in w.edits:
        console.print(f"• {line}")
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
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
    for path in (plot, save_cluster):
        if path is not None:
            console.print(f"wrote {path}")


def _better(metric: str, pct: float) -> bool:
    # Lower is better for time and money; higher for throughput and utilisation.
    lower = metric.startswith(("iteration", "$"))
    return pct < 0 if lower else pct > 0
