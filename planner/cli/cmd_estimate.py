"""`hetplan estimate`: the cost of a plan the user wrote (Megatron-style flags or a plan file).

    hetplan estimate MODEL CLUSTER --tp 4 --pp 2 --dp 2 --micro-batch 2 --global-batch 64
    hetplan estimate PLAN.json [--json]

With flags, ranks follow Megatron's order over the cluster file's nodes (TP fastest, then CP,
then DP, then PP). Prints iteration time, throughput, MFU, cost and per-stage time and memory.
Exit status 3 when the plan does not fit its GPUs (the numbers are printed), 2 for a bad input.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from cost_models.moe import DEFAULT_CAPACITY_FACTOR
from planner.api_checks import check_capacity_factor
from planner.cli.main import EXIT_INFEASIBLE, app
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
from planner.cli.plan_file import is_plan_file, load_checked
from planner.errors import HetplanError
from planner.limits import MAX_DEGREE, MAX_GLOBAL_BATCH, MAX_LAYERS
from planner.schema_groups import zero_stage_of

__all__ = ["estimate"]


def _layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise HetplanError(f"--layers-per-stage {text!r}: expected comma-separated integers "
                           "such as 3,9,9,5") from None


def _from_flags(model_arg: str, cluster_arg: str, *, tp: int, pp: int, dp: int | None,
                global_batch: int | None, layers_per_stage: str | None, seq_len: int | None,
                **plan_opts: Any) -> tuple[Any, Any, Any]:
    """Model, cluster and the Megatron-style plan the flags describe; `plan_opts` go to
    megatron_plan as they are (micro_batch, recompute, schedule, ...)."""
    from planner.cluster import load_cluster
    from planner.costing import megatron_plan
    from planner.graph import load_model

    model = load_model(model_arg, seq_len=seq_len)
    cluster = load_cluster(cluster_arg)
    dp = dp or max(1, cluster.world_size // (tp * pp * plan_opts.get("cp", 1)))
    gbs = global_batch or (model.spec.training.global_batch_size
                           if model.spec is not None else None)
    if gbs is None:
        raise HetplanError(f"model {model.name} gives no global batch size; pass --global-batch")
    plan = megatron_plan(model, cluster, tp=tp, pp=pp, dp=dp, global_batch=gbs,
                         layers_per_stage=_layers(layers_per_stage), **plan_opts)
    return model, cluster, plan


def _table(est: Any, title: str, plan: Any) -> Table:
    """Per stage: time, and memory per GPU by part (GiB) adding up to the peak."""
    from planner.report.plan_view import device_chunks, layer_ranges

    # Context parallelism's columns appear when a stage uses it (its point is the memory);
    # "cp K/V" when the runtime all-gathers K/V (StageMemory.context_gib).
    cp = any(s.cp > 1 for s in est.stages)
    kv = any(s.memory is not None and s.memory.context_gib > 0 for s in est.stages)
    t = Table(title=title, caption="GiB per GPU: weights + grads + optimizer + activations + "
              "other (recompute transient, framework overhead)"
              + (" + cp K/V (gathered K/V saved and in backward)" if kv else "")
              + " = peak, of capacity")
    for col in ("pipe", "stage", "GPU", "TP", *(("CP",) if cp else ()), "layers", "fwd ms",
                "bwd ms", "weights", "grads", "optim", "activ", "other",
                *(("cp K/V",) if kv else ()), "peak GiB"):
        t.add_column(col, justify="right" if col not in ("GPU", "layers") else "left")
    for s in est.stages:
        mem = f"{s.peak_memory_gib:.1f} / {s.memory_capacity_gib:.0f}"
        if s.peak_memory_gib > s.memory_capacity_gib:
            mem = f"[red]{mem}[/red]"
        m = s.memory
        parts = ([f"{x:.2f}" for x in (m.weights_gib, m.gradients_gib, m.optimizer_gib,
                                       m.activations_gib, m.other_gib,
                                       *((m.context_gib,) if kv else ()))]
                 if m is not None else ["-"] * (6 if kv else 5))
        t.add_row(str(s.pipeline), str(s.stage), s.gpu, str(s.tp),
                  *((str(s.cp),) if cp else ()),
                  layer_ranges(device_chunks(plan, s.pipeline, s.stage)), f"{s.fwd_ms:.2f}",
                  f"{s.bwd_ms:.2f}", *parts, mem)
    return t


_LAYOUT_FLAGS = {"tp": "--tp", "pp": "--pp", "dp": "--dp", "micro_batch": "--micro-batch",
                 "global_batch": "--global-batch", "recompute": "--recompute",
                 "sequence_parallel": "--sequence-parallel", "schedule": "--schedule",
                 "virtual_stages": "--virtual-stages", "layers_per_stage": "--layers-per-stage",
                 "ep": "--ep", "cp": "--cp", "zero1": "--zero1", "zero": "--zero"}
"""Flags that describe a layout: with a plan file, which states its own, they would be
ignored (the plan's numbers printed as if for the flags)."""


def _refuse_layout_flags(ctx: typer.Context, plan_path: str) -> None:
    from typer._click.core import ParameterSource

    given = [flag for name, flag in _LAYOUT_FLAGS.items()
             if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        raise HetplanError(f"{', '.join(given)}: {plan_path} states its own layout, which "
                           "estimate prices as it is; edit the plan file, or give MODEL CLUSTER "
                           "with the flags")


@app.command()
def estimate(
    ctx: typer.Context,
    model_or_plan: Annotated[str, typer.Argument(help="Model (zoo name / YAML / config.json) "
                                                 "or a plan JSON.")],
    cluster: Annotated[str | None, typer.Argument(help="Cluster (name or YAML); with a plan "
                                                  "file: price it on this cluster.")] = None,
    tp: Annotated[int, typer.Option("--tp", min=1, max=MAX_DEGREE,
                                    help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", min=1, max=MAX_DEGREE, help="Pipeline stages.")] = 1,
    dp: Annotated[int | None, typer.Option("--dp", min=1, max=MAX_DEGREE,
                                           help="Data-parallel degree (default: all GPUs).")
                  ] = None,
    micro_batch: Annotated[int, typer.Option("--micro-batch", min=1, max=MAX_GLOBAL_BATCH,
                                             help="Sequences per micro-batch.")] = 1,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", min=1, max=MAX_GLOBAL_BATCH,
        help="Sequences per iteration (default: the model spec's).")] = None,
    recompute: Annotated[str, typer.Option("--recompute", help="none | selective | full.")
                         ] = "none",
    selective_ac: Annotated[str | None, typer.Option(
        "--selective-ac", help="torchtitan's selective_ac_option for selective recompute: "
        "op (its per-op policy, the default) | N (every N-th block of a stage fully "
        "checkpointed, the others keep everything). torchtitan only.")] = None,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel")] = False,
    schedule: Annotated[str, typer.Option("--schedule", help="1f1b | gpipe | interleaved.")
                        ] = "1f1b",
    virtual_stages: Annotated[int, typer.Option("--virtual-stages", min=1, max=MAX_LAYERS,
                                                help="Chunks per stage (interleaved).")] = 1,
    layers_per_stage: Annotated[str | None, typer.Option(
        "--layers-per-stage", help="Layers per chunk incl. embedding and head, e.g. 3,9,9,5.")
    ] = None,
    ep: Annotated[int, typer.Option("--ep", min=1, max=MAX_DEGREE,
        help="Expert parallelism (mixture-of-experts "
                                    "models): experts split over groups of ep DP replicas.")
                  ] = 1,
    cp: Annotated[int, typer.Option("--cp", min=1, max=MAX_DEGREE,
                                    help="Context parallelism: each sequence split over cp "
                                    "GPUs (zig-zag chunks, K/V ring in attention); uses "
                                    "tp·cp·pp·dp GPUs.")] = 1,
    capacity_factor: Annotated[float, typer.Option(
        "--capacity-factor", callback=finite_option,
        help="MoE: the busiest expert's load over the balanced one.")
    ] = DEFAULT_CAPACITY_FACTOR,
    zero1: Annotated[bool, typer.Option(
        "--zero1", help="Older spelling of --zero 1 (with --zero N: stage max(N, 1)).")] = False,
    zero: Annotated[int | None, typer.Option(
        "--zero", help="ZeRO stage over DP: 0 none, 1 optimizer state, 2 and gradients, "
        "3 and weights (FSDP).")] = None,
    no_profiles: Annotated[bool, typer.Option("--no-profiles", help="Leave out the shipped "
                                              "profiles (with --profiles: those files only; "
                                              "else the analytic model alone).")] = False,
    profiles_files: ProfilesOption = None,
    framework: FrameworkOption = None,
    calibration: CalibrationOption = None,
    seq_len_text: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Predict iteration time, throughput, MFU, $ and per-stage memory of a given plan.

    With a plan file, --seq-len re-prices the plan's layout and batch at that length (a
    notice says so); `hetplan plan --seq-len N` finds the best layout for it.
    """
    from planner.costing import estimate as run_estimate
    from planner.costing.framework import framework_named
    from planner.costing.layer_ac import with_selective_ac
    from planner.costing.zero_runs import priced_zero_stages, zero_downgrade_note
    from planner.report.plan_view import batch_record

    check_capacity_factor(capacity_factor, name="--capacity-factor")
    if recompute not in ("none", "selective", "full"):
        raise HetplanError(f"--recompute {recompute!r}: use none, selective or full")
    if schedule not in ("1f1b", "gpipe", "interleaved"):
        raise HetplanError(f"--schedule {schedule!r}: use 1f1b, gpipe or interleaved")
    use_calibration(calibration)
    if zero is not None and not 0 <= zero <= 3:
        raise HetplanError(f"--zero {zero}: use 0, 1, 2 or 3")
    zero_stage = zero_stage_of(zero or 0, zero1)
    seq_len = parse_seq_len(seq_len_text)
    profiles = load_profiles(profiles_files, shipped=not no_profiles)
    if is_plan_file(model_or_plan) or (model_or_plan.endswith(".json") and cluster is None):
        # A plan, priced on the cluster it embeds or on CLUSTER (checked against it).
        _refuse_layout_flags(ctx, model_or_plan)
        checked = load_checked(model_or_plan, cluster, seq_len=seq_len)
        plan, graph = checked.plan, checked.graph
        fw = with_selective_ac(framework_named(framework, plan.predicted), selective_ac,
                               any(st.recompute == "selective" for pipe in plan.pipelines
                                   for st in pipe.stages))
        note_calibration_gpus(checked.cluster.gpu_counts())
        check_capacity_factor(capacity_factor, graph, "--capacity-factor")
        est = run_estimate(None, checked.cluster, plan, profiles=profiles, framework=fw,
                           capacity_factor=capacity_factor)
        title = f"{plan.model.get('name', 'model')} on {checked.cluster.name}"
    else:
        if cluster is None:
            raise HetplanError("estimate needs MODEL CLUSTER and flags, or a PLAN.json")
        model, cl, plan = _from_flags(
            model_or_plan, cluster, tp=tp, pp=pp, dp=dp, global_batch=global_batch,
            layers_per_stage=layers_per_stage, seq_len=seq_len, micro_batch=micro_batch,
            recompute=recompute,
            sequence_parallel=sequence_parallel, schedule=schedule,
            virtual_stages=virtual_stages, zero1=zero_stage >= 1, zero=zero_stage, ep=ep,
            cp=cp)
        fw = with_selective_ac(framework_named(framework), selective_ac,
                               recompute == "selective")
        note_calibration_gpus(cl.gpu_counts())
        check_capacity_factor(capacity_factor, model.graph, "--capacity-factor")
        est = run_estimate(model, cl, plan, profiles=profiles, framework=fw,
                           capacity_factor=capacity_factor)
        title = f"{model.name} on {cl.name}"
        graph = model.graph
    levels = priced_zero_stages(plan, graph, fw)
    zero_note = zero_downgrade_note(plan, levels, fw)
    if json_out:
        record = {**est.to_dict(), **batch_record(plan, graph.seq_len)}
        if (plan.model or {}).get("num_experts"):
            record["moe"] = {"capacity_factor": capacity_factor, "routing": "balanced on "
                             "average; busiest expert at capacity_factor × the mean load, "
                             "charged at ep > 1",
                             "dispatch_per_tp_rank": ("all routed tokens"
                                                      if fw.moe_dispatch_whole_per_tp_rank
                                                      else "1/tp of the routed tokens")}
        if zero_note:
            record["zero_priced"] = [list(r) for r in levels]
        print_json(record)
    else:
        _print(est, title, plan, capacity_factor, graph.seq_len, fw)
        if zero_note:
            console.print(f"note: {zero_note}")
    if not est.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def _print(est: Any, title: str, plan: Any, capacity_factor: float, seq_len: int,
           fw: Any) -> None:
    from planner.report.moe_line import moe_line
    from planner.report.plan_view import batch_line, schedule_label

    cp_ring = fw.cp_ring_overlap

    wide_console(150).print(_table(est, f"{title}, {schedule_label(plan)}", plan))
    console.print(batch_line(plan, seq_len))
    price = ("" if est.usd_per_hour is None else
             f", ${est.usd_per_hour:.2f}/h, ${est.usd_per_million_tokens:.3f} per 1M tokens")
    console.print(f"iteration {est.iteration_time_s:.4f} s, {est.tokens_per_s:,.0f} tokens/s, "
                  f"MFU {100 * est.mfu:.1f} %, bubble {100 * est.bubble_fraction:.1f} %{price}")
    moe = moe_line(plan, capacity_factor, fw)
    if moe:
        console.print(moe)
    cps = sorted({plan.cp(p) for p in range(len(plan.pipelines))})
    if cps != [1]:
        console.print(f"context parallelism: cp {', '.join(map(str, cps))}; each sequence in "
                      "2·cp zig-zag chunks (balanced causal attention), "
                      + ("K/V ring priced per step against that step's attention"
                         if cp_ring else "K/V all-gathered before attention, its gradient "
                         "all-reduced, not overlapped") + ", gradients reduced over dp·cp")
    for problem in est.problems:
        console.print(f"[red]infeasible:[/red] {problem}")
