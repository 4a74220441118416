"""`hetplan simulate PLAN.json [--gantt out.png] [--svg out.svg] [--json]`: the pipeline schedule.

Costs the plan with `planner.estimate` (the plan file embeds its model and cluster), simulates
each pipeline's schedule with its events, prints per stage what it does and how idle it is, and
draws the Gantt chart. Exit status 3 when the plan does not fit its GPUs (the schedule is
still shown, with the numbers), 2 for a bad plan file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from planner.cli.main import EXIT_INFEASIBLE, app
from planner.cli.options import (
    CalibrationOption,
    FrameworkOption,
    ProfilesOption,
    SeqLenOption,
    load_profiles,
    note_calibration_gpus,
    parse_seq_len,
    use_calibration,
)
from planner.cli.output import console, print_json, wide_console

__all__ = ["simulate", "simulate_plan"]


def simulate_plan(plan_path: str | Path, profiles: Any = None, framework: str | None = None,
                  seq_len: int | None = None) -> tuple[Any, Any, tuple[Any, ...]]:
    """(plan, estimate, timelines with events) for a plan file; `profiles`: a ProfileSet
    (None: the shipped profiles); `framework`: a `--framework` name (None: the plan's);
    `seq_len`: re-price the plan at that length (`plan_file.at_seq_len`)."""
    from planner.cli.plan_file import load_checked
    from planner.costing import estimate
    from planner.costing.framework import framework_named
    from planner.simulate import with_events

    plan = load_checked(plan_path, seq_len=seq_len).plan
    note_calibration_gpus(st.gpu for pipe in plan.pipelines for st in pipe.stages)
    # The model and cluster the plan embeds, priced for the runtime it was planned for.
    est = estimate(None, None, plan, framework=framework_named(framework, plan.predicted),
                   profiles=profiles)
    timelines = est.timeline if isinstance(est.timeline, tuple) else (est.timeline,)
    return plan, est, tuple(with_events(t) for t in timelines)


@app.command()
def simulate(
    plan_file: Annotated[Path, typer.Argument(help="A plan JSON (from `hetplan plan -o`).")],
    gantt: Annotated[Path | None, typer.Option(
        "--gantt", help="Write the Gantt chart (.png or .svg).")] = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Also write it as SVG.")] = None,
    profiles: ProfilesOption = None,
    framework: FrameworkOption = None,
    calibration: CalibrationOption = None,
    seq_len: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Simulate a plan's pipeline schedule: per-stage busy time, bubble, Gantt chart.

    --seq-len re-prices the plan's layout and batch at that length (a notice says so).
    """
    from planner.report.figure import check_figure_path
    from planner.report.gantt import draw_gantt
    from planner.report.plan_view import (
        batch_line,
        batch_record,
        fold_pipelines,
        folded_stage_labels,
        plan_seq_len,
        stage_labels,
        timeline_to_dict,
    )

    tokens = parse_seq_len(seq_len)
    for path, flag in ((gantt, "--gantt"), (svg, "--svg")):
        if path is not None:
            check_figure_path(path, flag)
    use_calibration(calibration)
    plan, est, timelines = simulate_plan(plan_file, load_profiles(profiles), framework, tokens)
    seq = plan_seq_len(plan)
    labels = stage_labels(plan)
    title = f"{(plan.model or {}).get('name', 'model')} on {(plan.cluster or {}).get('name', '')}"
    written = []
    if gantt is not None or svg is not None:
        # Identical data-parallel replicas draw once, as one row group marked ×N.
        groups = fold_pipelines(plan, timelines)
        shown = [timelines[g[0]] for g in groups]
        written = [draw_gantt(shown, path, folded_stage_labels(plan, groups), title=title,
                              counts=[len(g) for g in groups])
                   for path in (gantt, svg) if path is not None]
    if json_out:
        print_json({
            "plan": str(plan_file),
            "iteration_time_s": round(est.iteration_time_s, 9),
            "bubble_fraction": round(est.bubble_fraction, 9),
            **(batch_record(plan, seq) if seq is not None else {}),
            "stages": labels,
            "pipelines": [timeline_to_dict(t) for t in timelines],
            "pictures": [str(p) for p in written],
            "feasible": est.feasible,
            "problems": list(est.problems),
        })
    else:
        wide_console(110).print(_table(plan, est, timelines, title))
        if seq is not None:
            console.print(batch_line(plan, seq))
        for path in written:
            console.print(f"wrote {path}")
        for problem in est.problems:
            console.print(f"[red]infeasible:[/red] {problem}")
    if not est.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def _table(plan: Any, est: Any, timelines: tuple[Any, ...], title: str) -> Table:
    from planner.report.plan_view import device_chunks, layer_ranges, schedule_label

    table = Table(title=f"{title}: iteration {est.iteration_time_s * 1e3:.2f} ms, bubble "
                  f"{est.bubble_fraction:.1%}, {schedule_label(plan)}, micro-batch "
                  f"{plan.micro_batch_size}", box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="busy: share of the iteration computing; held: micro-batches whose "
                  "activations are held at the peak; tail: DP sync + optimizer step; GiB: peak "
                  "memory / capacity")
    for name in ("stage", "GPU×TP", "layers", "fwd ms", "bwd ms", "busy", "held", "tail ms",
                 "GiB"):
        left = name in ("stage", "GPU×TP", "layers")
        table.add_column(name, justify="left" if left else "right", no_wrap=True)
    rows = iter(est.stages)
    for p, t in enumerate(timelines):
        for d in range(t.num_devices):
            st = next(rows)
            layers = layer_ranges(device_chunks(plan, p, d))
            inflight = t.max_inflight[d] / t.virtual_stages
            tail = ((t.dp_sync_s[d] if t.dp_sync_s else 0.0)
                    + (t.optimizer_s[d] if t.optimizer_s else 0.0))
            table.add_row(
                f"{p}.{d}" if len(timelines) > 1 else str(d), f"{st.gpu}×{st.tp}", layers,
                f"{st.fwd_ms:.1f}", f"{st.bwd_ms:.1f}", f"{t.busy_s[d] / t.makespan_s:.0%}",
                f"{inflight:g}", f"{tail * 1e3:.1f}",
                f"{st.peak_memory_gib:.1f}/{st.memory_capacity_gib:.0f}")
    return table
