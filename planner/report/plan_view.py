"""Plain views of a plan and its simulated timelines: row labels and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.schema import Plan
from planner.simulate import Timeline

__all__ = ["batch_line", "batch_record", "batch_text", "plan_seq_len", "stage_labels",
           "stage_layout", "timeline_to_dict"]


def _layers(ranges: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{a}-{b - 1}" if b - a > 1 else f"{a}" for a, b in ranges)


def stage_labels(plan: Plan) -> list[str]:
    """One label per device group, pipelines in order: `stage 0: A100-SXM4-80GB TP4, layers 0-9`.

    Layer numbers are inclusive and count the chain (0 = embedding, last = head); under
    interleaving a stage lists each of its chunks' ranges.
    """
    many = len(plan.pipelines) > 1
    out = []
    for p, pipe in enumerate(plan.pipelines):
        groups = plan.device_groups(p)
        for d, st in enumerate(groups):
            chunks = pipe.stages[d::len(groups)]
            head = f"p{p} stage {d}" if many else f"stage {d}"
            out.append(f"{head}: {st.gpu} TP{st.tp}, layers {_layers([c.layers for c in chunks])}")
    return out


def stage_layout(plan: Plan, pipeline: int = 0) -> str:
    """The first pipeline's shape on one line: `A100-SXM4-80GB×4[0-9] → V100-SXM2-32GB×8[10-25]`."""
    pipe = plan.pipelines[pipeline]
    groups = plan.device_groups(pipeline)
    parts = []
    for d, st in enumerate(groups):
        chunks = pipe.stages[d::len(groups)]
        parts.append(f"{st.gpu}×{st.tp}[{_layers([c.layers for c in chunks])}]")
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
