"""`hetplan plan`: search the best plan for a model on a cluster.

    hetplan plan MODEL CLUSTER [-o plan.json] [--global-batch N] [--objective throughput|cost]
                 [--budget-usd-per-hour X] [--schedule 1f1b,gpipe,interleaved]
                 [--micro-batch 1,2,4] [--top-k K] [--json]

Prints the winner's stages (GPU type and count, TP, layers, forward/backward ms, peak memory
against capacity), its iteration time, tokens/s, MFU and cost, then the runners-up, then the
certificate: proven optimal, or the gap to a lower bound no plan beats. A
progress bar appears when the search runs for more than a second (never with --json).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
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
from planner.errors import HetplanError
from planner.limits import MAX_GLOBAL_BATCH
from planner.outfile import check_output

__all__ = ["parse_micro_batches", "parse_schedules", "plan"]

_BAR_AFTER_S = 1.0


class _Bar:
    """A rich progress bar that shows itself only once the search has run a second."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.progress: Progress | None = None
        self.task: Any = None

    def __call__(self, fraction: float, what: str) -> None:
        if self.progress is None:
            if time.perf_counter() - self.start < _BAR_AFTER_S:
                return
            self.progress = Progress(TextColumn("searching"), BarColumn(),
                                     TextColumn("{task.percentage:>3.0f}%"),
                                     TextColumn("{task.description}"), TimeElapsedColumn(),
                                     # stderr: stdout carries the plan (or its JSON)
                                     console=Console(stderr=True), transient=True)
            self.progress.start()
            self.task = self.progress.add_task(what, total=1.0)
        self.progress.update(self.task, completed=fraction, description=what)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _stage_table(plan: Any, est: Any, title: str) -> Table:
    """One block of rows per distinct pipeline shape; identical DP replicas share it."""
    from planner.report.plan_view import device_chunks, layer_ranges, pipelines_label

    t = Table(title=title)
    cp = any(st.cp for pipe in plan.pipelines for st in pipe.stages)
    for col in ("pipelines", "µbatches", "stage", "GPU", "TP", *(("CP",) if cp else ()),
                "layers", "recompute", "fwd ms", "bwd ms", "memory GiB"):
        t.add_column(col, justify="left" if col in ("GPU", "layers", "recompute") else "right")
    by_pipe: dict[int, list[Any]] = {}
    for s in est.stages:
        by_pipe.setdefault(s.pipeline, []).append(s)
    groups: dict[tuple, list[int]] = {}
    for p_idx, pipe in enumerate(plan.pipelines):
        key = (pipe.microbatches,
               tuple((st.layers, st.gpu, st.tp, st.cp, st.recompute) for st in pipe.stages))
        groups.setdefault(key, []).append(p_idx)
    for (microbatches, _), members in groups.items():
        label = pipelines_label(members)
        for k, s in enumerate(by_pipe[members[0]]):
            st = plan.pipelines[s.pipeline].stages[s.stage]
            mem = f"{s.peak_memory_gib:.1f} / {s.memory_capacity_gib:.0f}"
            t.add_row(label if k == 0 else "", str(microbatches) if k == 0 else "",
                      str(s.stage), s.gpu, str(s.tp), *((str(st.cp or 1),) if cp else ()),
                      layer_ranges(device_chunks(plan, s.pipeline, s.stage)),
                      st.recompute, f"{s.fwd_ms:.2f}", f"{s.bwd_ms:.2f}", mem)
        t.add_section()
    return t


def _summary(plan: Any, est: Any) -> str:
    from planner.report.plan_view import schedule_label

    price = ("no prices in the cluster file" if est.usd_per_hour is None else
             f"${est.usd_per_hour:.2f}/h, ${est.usd_per_million_tokens:.3f} per 1M tokens")
    return (f"iteration {est.iteration_time_s:.4f} s, {est.tokens_per_s:,.0f} tokens/s, "
            f"MFU {100 * est.mfu:.1f} %, {price}; micro-batch {plan.micro_batch_size}, "
            f"{schedule_label(plan)}, {len(plan.pipelines)} pipeline(s), {len(plan.ranks)} GPUs")


def _shape(plan: Any) -> str:
    """One part per distinct pipeline shape: `2 pipelines: A100-SXM4-80GB×4 L0–9 → ...`
    (GPU type × TP degree, then its layers)."""
    from planner.report.plan_view import stage_layout

    shapes = Counter(stage_layout(plan, p) for p in range(len(plan.pipelines)))
    return "; ".join(f"{v} pipeline{'s' if v > 1 else ''}: {k}" for k, v in shapes.items())


def _items(values: list[str] | None) -> list[str]:
    return [x.strip() for v in values or () for x in v.split(",") if x.strip()]


def parse_schedules(values: list[str] | None) -> tuple[str, ...] | None:
    """`--schedule` values (repeated or comma-separated); None: the default space."""
    out = _items(values)
    for s in out:
        if s not in ("1f1b", "gpipe", "interleaved"):
            raise HetplanError(f"--schedule {s!r}: use 1f1b, gpipe or interleaved")
    return tuple(dict.fromkeys(out)) or None


def parse_micro_batches(values: list[str] | None) -> tuple[int, ...] | None:
    """`--micro-batch` values (repeated or comma-separated positive integers)."""
    out = []
    for v in _items(values):
        # isascii: '²' is a digit to str.isdigit but not to int(); 9 digits bound int().
        if (not (v.isascii() and v.isdigit()) or len(v) > 9
                or not 1 <= int(v) <= MAX_GLOBAL_BATCH):
            raise HetplanError(f"--micro-batch {v[:20]!r}: give positive integers up to "
                               f"{MAX_GLOBAL_BATCH:,}, e.g. --micro-batch 1,2,4")
        out.append(int(v))
    return tuple(dict.fromkeys(out)) or None


def _optimality(s: Any) -> str:
    """The certificate in words: proven optimal, or the gap to the lower bound."""
    unit = "s/iteration" if s.objective == "throughput" else "$ per 1M tokens"
    if s.exact:
        return f"optimal: meets the lower bound {s.lower_bound:.6g} {unit}"
    if s.gap_pct is None:
        return "optimality gap unknown (no lower bound for this objective; see --json notes)"
    return (f"gap {s.gap_pct:.1f} %: no plan beats the lower bound {s.lower_bound:.6g} {unit}; "
            f"a better plan, if any, is at most {s.gap_pct:.1f} % better (reductions: --json "
            "notes)")


@app.command()
def plan(
    model: Annotated[str, typer.Argument(help="Model: zoo name, YAML or config.json.")],
    cluster: Annotated[str, typer.Argument(
        help="Cluster: bundled name (planner/configs/clusters) or YAML.")],
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the plan JSON "
                                               "here.")] = None,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", min=1, max=MAX_GLOBAL_BATCH,
        help="Sequences per iteration (default: the model spec's).")] = None,
    objective: Annotated[str, typer.Option("--objective", help="throughput | cost.")
                         ] = "throughput",
    budget_usd_per_hour: Annotated[float | None, typer.Option(
        "--budget-usd-per-hour", min=0.0, callback=finite_option,
        help="Only plans whose GPUs cost at most this.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=1000,
        help="Alternatives to list.")] = 5,
    schedule: Annotated[list[str] | None, typer.Option(
        "--schedule", help="Search only these schedules (repeat or comma-separate): 1f1b, "
        "gpipe, interleaved. Default: all three.")] = None,
    micro_batch: Annotated[list[str] | None, typer.Option(
        "--micro-batch", help="Micro-batch sizes to search (repeat or comma-separate). "
        "Default: 1, 2, 4, 8 where they divide the global batch.")] = None,
    sequence_parallel: Annotated[bool, typer.Option(
        "--sequence-parallel", help="Plan with Megatron sequence parallelism.")] = False,
    framework: FrameworkOption = None,
    calibration: CalibrationOption = None,
    profiles: ProfilesOption = None,
    seq_len: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    timing: Annotated[bool, typer.Option(
        "--timing", help="With --json: add the search's wall time (search.seconds), the one "
        "field that differs between identical runs.")] = False,
) -> None:
    """Find the fastest (or cheapest) plan for MODEL on CLUSTER, exactly."""
    from cost_models.moe import DEFAULT_CAPACITY_FACTOR
    from planner.cluster import load_cluster
    from planner.costing.framework import framework_named
    from planner.graph import load_model
    from planner.report.alternatives import alternative_records, placement_note, placement_twins
    from planner.report.moe_line import moe_line
    from planner.report.plan_view import batch_line
    from planner.search import plan as search

    if objective not in ("throughput", "cost"):
        raise HetplanError(f"--objective {objective!r}: use throughput or cost")
    schedules = parse_schedules(schedule)
    sizes = parse_micro_batches(micro_batch)
    if top_k < 1:
        raise HetplanError(f"--top-k {top_k}: must be at least 1")
    if output:
        check_output(output, "-o")  # before the search, not after it
    tokens = parse_seq_len(seq_len)
    use_calibration(calibration)
    fw = framework_named(framework)
    measured = load_profiles(profiles)
    m = load_model(model, seq_len=tokens)
    cl = load_cluster(cluster)
    note_calibration_gpus(cl.gpu_counts())
    bar = None if json_out else _Bar()
    try:
        result = search(m, cl, global_batch_size=global_batch, objective=objective,
                        budget_usd_per_hour=budget_usd_per_hour, top_k=top_k,
                        sequence_parallel=sequence_parallel, progress=bar, framework=fw,
                        profiles=measured, schedules=schedules, micro_batch_sizes=sizes)
    finally:
        if bar is not None:
            bar.close()
    if output:
        result.best.save(output)
    if json_out:
        print_json({"plan": result.best.to_dict(),
                    "alternatives": alternative_records(
                        result.candidates, [_shape(p) for p in result.candidates]),
                    "search": result.stats.to_dict(timing=timing)})
        return
    best, est = result.best, result.estimates[0]
    console.print(_stage_table(best, est, f"{m.name} on {cl.name}: best plan"))
    console.print(batch_line(best, m.seq_len))
    console.print(_summary(best, est))
    moe = moe_line(best, DEFAULT_CAPACITY_FACTOR, fw)  # the search prices the default
    if moe:
        console.print(moe)
    if len(result.candidates) > 1:
        alt = Table(title="alternatives")
        for col in ("#", "µbatch", "iteration s", "tokens/s", "MFU %", "$/h", "$/1M tok",
                    "shape"):
            alt.add_column(col, justify="left" if col == "shape" else "right")
        twins = placement_twins(result.candidates)
        for k, (p, e) in enumerate(zip(result.candidates, result.estimates, strict=True)):
            shape = (_shape(p) if twins[k] is None
                     else placement_note(result.candidates, k, twins[k]))
            alt.add_row(str(k + 1), str(p.micro_batch_size), f"{e.iteration_time_s:.4f}",
                        f"{e.tokens_per_s:,.0f}", f"{100 * e.mfu:.1f}",
                        "-" if e.usd_per_hour is None else f"{e.usd_per_hour:.2f}",
                        "-" if e.usd_per_million_tokens is None
                        else f"{e.usd_per_million_tokens:.3f}", shape)
        console.print(alt)
    s = result.stats
    console.print(f"searched {s.shapes} shapes ({s.shapes_pruned} pruned by the lower bound), "
                  f"{s.programs} programs, {s.costed} plans re-costed, {s.seconds:.2f} s")
    console.print(_optimality(s))
    if output:
        console.print(f"plan written to {output}")
