"""`hetplan compare MODEL CLUSTER... [--global-batch N] [--tokens T] [--objective throughput|cost]
[--budget-usd-per-hour X] [--schedule S] [--micro-batch B] [--json] [--plot out.png]`.

Plans the model on each cluster (`planner.search.plan`, costed by `planner.estimate`) and ranks
them by tokens/s, with cost per hour, per million tokens, and to train T tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
from planner.cli.output import console, print_json, wide_console
from planner.cli.progress import spinner
from planner.errors import HetplanError
from planner.limits import MAX_GLOBAL_BATCH

__all__ = ["compare", "duration"]


def duration(seconds: float | None) -> str:
    """Human time: `3.2 h`, `12.5 days`."""
    if seconds is None:
        return "-"
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.1f} s"


@app.command()
def compare(
    model: Annotated[str, typer.Argument(help="Model: zoo name, YAML or config.json.")],
    clusters: Annotated[list[str], typer.Argument(help="Clusters: names or YAML files.")],
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", min=1, max=MAX_GLOBAL_BATCH,
        help="Sequences per iteration (default: the model file's).")] = None,
    tokens: Annotated[str | None, typer.Option(
        "--tokens", help="Tokens to train, for time and cost to train (e.g. 300B, 2e12).")] = None,
    objective: Annotated[str, typer.Option(
        "--objective", help="What each cluster's plan optimises: throughput | cost.")
    ] = "throughput",
    budget_usd_per_hour: Annotated[float | None, typer.Option(
        "--budget-usd-per-hour", min=0.0, callback=finite_option,
        help="Each cluster's plan costs at most this.")] = None,
    schedule: Annotated[list[str] | None, typer.Option(
        "--schedule", help="Search only these schedules (repeat or comma-separate): 1f1b, "
        "gpipe, interleaved. Default: all three.")] = None,
    micro_batch: Annotated[list[str] | None, typer.Option(
        "--micro-batch", help="Micro-batch sizes to search (repeat or comma-separate).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Throughput vs $ per 1M tokens with the Pareto front (.png or .svg).")
    ] = None,
    framework: FrameworkOption = None,
    calibration: CalibrationOption = None,
    profiles: ProfilesOption = None,
    seq_len: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Best plan of MODEL on each CLUSTER, ranked by throughput, with costs."""
    import planner
    from planner.cli.cmd_plan import parse_micro_batches, parse_schedules
    from planner.costing.framework import framework_named
    from planner.report.compare import compare as run_compare
    from planner.report.compare import parse_tokens
    from planner.report.figure import check_figure_path
    from planner.report.pareto import draw_pareto

    if objective not in ("throughput", "cost"):
        raise HetplanError(f"--objective {objective!r}: use throughput or cost")
    search_options = {"schedules": parse_schedules(schedule),
                      "micro_batch_sizes": parse_micro_batches(micro_batch),
                      "budget_usd_per_hour": budget_usd_per_hour}
    if plot is not None:
        check_figure_path(plot, "--plot")  # before planning every cluster, not after
    use_calibration(calibration)
    fw = framework_named(framework)
    measured = load_profiles(profiles)
    train_tokens = parse_tokens(tokens) if tokens is not None else None
    graph = planner.load_model(model, seq_len=parse_seq_len(seq_len))
    loaded = []
    for arg in clusters:
        c = planner.load_cluster(arg)
        name = c.name if c.name not in [n for n, _ in loaded] else arg
        loaded.append((name, c))
    note_calibration_gpus((gpu for _, c in loaded for gpu in c.gpu_counts()),
                          "these clusters" if len(loaded) > 1 else "this cluster")
    with spinner(f"planning {_model_name(graph, model)} on {len(loaded)} cluster(s)",
                 enabled=not json_out):
        rows = run_compare(graph, loaded, global_batch_size=global_batch, tokens=train_tokens,
                           objective=objective, framework=fw, profiles=measured,
                           search_options=search_options)
    if plot is not None:
        ok = [r for r in rows if r.feasible]
        draw_pareto([r.cluster for r in ok], [r.usd_per_million_tokens for r in ok],
                    [r.tokens_per_s or 0.0 for r in ok], plot, title=_model_name(graph, model),
                    usd_per_hour=[r.usd_per_hour for r in ok],
                    infeasible=[r.cluster for r in rows if not r.feasible])
    if json_out:
        print_json([r.to_dict() for r in rows])
        return
    wide_console(150).print(_table(rows, _model_name(graph, model), train_tokens))
    console.print(_batch(rows, graph.seq_len))
    for r in rows:
        if not r.feasible:
            console.print(f"[yellow]{r.cluster}[/]: no plan: {r.problem}")
    if plot is not None:
        console.print(f"wrote {plot}")


def _batch(rows: list[Any], seq_len: int) -> str:
    """The batch every cluster's plan shares (its micro-batch is a column of the table)."""
    from planner.report.plan_view import batch_text

    gbs = next((r.global_batch_size for r in rows if r.feasible), None)
    return f"seq_len {seq_len:,}" if gbs is None else batch_text(seq_len, gbs)


def _model_name(graph: Any, arg: str) -> str:
    return str(getattr(graph, "name", None) or arg)


def _table(rows: list[Any], model: str, train_tokens: float | None) -> Table:
    title = f"{model}: best plan per cluster, fastest first"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    cols = ["#", "cluster", "tokens/s", "iter s", "MFU", "$/h", "$/1M tok"]
    if train_tokens:
        cols += [f"time for {_count(train_tokens)} tok", "cost"]
    cols += ["GPUs used", "stages×DP", "µbatch"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("cluster", "GPUs used") else "right",
                         no_wrap=c != "GPUs used")
    for i, r in enumerate(rows, 1):
        if not r.feasible:
            table.add_row(str(i), r.cluster, "[yellow]no feasible plan[/]",
                          *["-"] * (len(cols) - 3))
            continue
        cells = [str(i), r.cluster, f"{r.tokens_per_s:,.0f}", f"{r.iteration_time_s:.3f}",
                 f"{r.mfu:.1%}", _money(r.usd_per_hour), _money(r.usd_per_million_tokens, 4)]
        if train_tokens:
            cells += [duration(r.train_time_s), _money(r.train_cost_usd, 0)]
        used = ", ".join(f"{t} {n}/{r.gpus_available.get(t, 0)}"
                         for t, n in r.gpus_used.items())
        cells += [used, f"{r.stages}×{r.pipelines}", str(r.micro_batch_size)]
        table.add_row(*cells)
    return table


def _count(tokens: float) -> str:
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if tokens >= size:
            return f"{tokens / size:g}{suffix}"
    return f"{tokens:g}"


def _money(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"
