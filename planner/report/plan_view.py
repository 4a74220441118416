"""Plain views of a plan and its simulated timelines: row labels and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.schema import Plan
from planner.simulate import Timeline

__all__ = ["batch_line", "batch_record", "batch_text", "device_chunks", "fold_pipelines",
           "folded_stage_labels", "layer_ranges", "plan_seq_len", "schedule_label",
           "stage_labels", "stage_layout", "timeline_to_dict"]


def layer_ranges(ranges: Sequence[tuple[int, int]]) -> str:
    """The one notation for layers in every table: half-open [a, b) ranges as inclusive
    `L0–15`, a device's interleaved chunks joined by ` | ` (`L0–15 | L32–47`); `L7` for one."""
    return " | ".join(f"L{a}–{b - 1}" if b - a > 1 else f"L{a}" for a, b in ranges)


def device_chunks(plan: Plan, pipeline: int, device: int) -> list[tuple[int, int]]:
    """[start, end) of each model chunk device group `device` of `pipeline` holds: one range,
    or V of them under the interleaved schedule (chunk j runs on group j mod S)."""
    groups = len(plan.device_groups(pipeline))
    return [tuple(c.layers) for c in plan.pipelines[pipeline].stages[device::groups]]


def schedule_label(plan: Plan) -> str:
    """`1f1b`, `gpipe`, or `interleaved (2 virtual stages)`: chunks per device group."""
    if plan.schedule != "interleaved":
        return plan.schedule
    return f"interleaved ({plan.virtual_stages} virtual stages)"


def stage_labels(plan: Plan) -> list[str]:
    """One label per device group, pipelines in order: `stage 0: A100-SXM4-80GB TP4, layers 0-9`.

    Layer numbers are inclusive and count the chain (0 = embedding, last = head); under
    interleaving a stage lists each of its chunks' ranges (`layer_ranges`).
    """
    many = len(plan.pipelines) > 1
    out = []
    for p in range(len(plan.pipelines)):
        for d, st in enumerate(plan.device_groups(p)):
            head = f"p{p} stage {d}" if many else f"stage {d}"
            out.append(f"{head}: {st.gpu} TP{st.tp}, {layer_ranges(device_chunks(plan, p, d))}")
    return out


def fold_pipelines(plan: Plan, timelines: Sequence[Timeline]) -> list[list[int]]:
    """Pipelines that would draw the same rows, grouped (first-seen order): equal simulated
    timelines and equal stages (GPU type, TP, layers). Identical data-parallel replicas fold
    into one group, so a chart of 64 replicas shows one pipeline's rows marked ×64."""
    groups: list[tuple[Timeline, str, list[int]]] = []
    for p, t in enumerate(timelines):
        shape = stage_layout(plan, p)
        for tg, sg, members in groups:
            if sg == shape and tg == t:
                members.append(p)
                break
        else:
            groups.append((t, shape, [p]))
    return [members for _, _, members in groups]


def _pipes(members: Sequence[int]) -> str:
    if len(members) == 1:
        return f"p{members[0]}"
    run = members == list(range(members[0], members[-1] + 1))
    names = (f"p{members[0]}–{members[-1]}" if run else
             "p" + ",".join(map(str, members[:4])) + (",…" if len(members) > 4 else ""))
    return f"{names} ×{len(members)}"


def folded_stage_labels(plan: Plan, groups: Sequence[Sequence[int]]) -> list[str]:
    """`stage_labels` for folded pipelines: `p0–7 ×8 stage 1: T4 TP1, L2–3` (a group's first
    pipeline stands for all of them)."""
    many = len(plan.pipelines) > 1
    out = []
    for members in groups:
        p = members[0]
        for d, st in enumerate(plan.device_groups(p)):
            head = f"{_pipes(list(members))} stage {d}" if many else f"stage {d}"
            out.append(f"{head}: {st.gpu} TP{st.tp}, {layer_ranges(device_chunks(plan, p, d))}")
    return out


def stage_layout(plan: Plan, pipeline: int = 0) -> str:
    """A pipeline's shape on one line: `A100-SXM4-80GB×4 L0–9 → V100-SXM2-32GB×8 L10–25`
    (× the TP degree; `ep` when experts are split, `cp` when the sequence is; chunks as in
    `layer_ranges`)."""
    parts = []
    for d, st in enumerate(plan.device_groups(pipeline)):
        ep = f" ep{st.ep}" if st.ep else ""
        cp = f" cp{st.cp}" if st.cp else ""
        parts.append(f"{st.gpu}×{st.tp}{ep}{cp} {layer_ranges(device_chunks(plan, pipeline, d))}")
    return " → ".join(parts)


def timeline_to_dict(t: Timeline, events: bool = True) -> dict[str, Any]:
    """A timeline as JSON-ready data (times rounded to the nanosecond: stable bytes)."""

    def r(x: float) -> float:
        return round(x, 9)

    out: dict[str, Any] = {
        "makespan_s": r(t.makespan_s),
        "pipeline_s": r(t.pipeline_s),
        "bubble_fraction": r(t.bubble_fraction),
        "schedule": t.schedule,
        "microbatches": t.microbatches,
        "virtual_stages": t.virtual_stages,
        "devices": [
            {"device": d, "busy_s": r(t.busy_s[d]), "max_inflight": t.max_inflight[d],
             "dp_sync_s": r(t.dp_sync_s[d]) if t.dp_sync_s else 0.0,
             "optimizer_s": r(t.optimizer_s[d]) if t.optimizer_s else 0.0}
            for d in range(t.num_devices)],
    }
    if events:
        out["events"] = [
            {"device": e.device, "kind": e.kind, "microbatch": e.microbatch, "chunk": e.chunk,
             "start_s": r(e.start_s), "end_s": r(e.end_s)} for e in t.events]
    return out


def batch_text(seq_len: int, global_batch: int, micro_batch: int | None = None) -> str:
    """What one iteration processes, as the product it is:
    `seq_len 4,096 × global batch 256 (micro-batch 2) = 1,048,576 tokens per iteration`."""
    micro = "" if micro_batch is None else f" (micro-batch {micro_batch})"
    return (f"seq_len {seq_len:,} × global batch {global_batch:,}{micro} = "
            f"{seq_len * global_batch:,} tokens per iteration")


def batch_line(plan: Plan, seq_len: int) -> str:
    """`batch_text` of a plan."""
    return batch_text(seq_len, plan.global_batch_size, plan.micro_batch_size)


def batch_record(plan: Plan, seq_len: int) -> dict[str, int]:
    """`batch_line` as JSON fields."""
    return {"seq_len": seq_len, "global_batch_size": plan.global_batch_size,
            "micro_batch_size": plan.micro_batch_size,
            "tokens_per_iteration": seq_len * plan.global_batch_size}


def plan_seq_len(plan: Plan) -> int | None:
    """The sequence length the plan's embedded model is priced at (a spec's `seq_len`, or a
    measured module's); None when it embeds no model."""
    model = plan.model or {}
    graph = model.get("graph")
    value = graph.get("seq_len") if isinstance(graph, dict) else model.get("seq_len")
    return value if isinstance(value, int) else None
