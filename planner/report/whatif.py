"""What-if: plan before and after a scenario edit of the cluster, and what changed by how much."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cost_models.profiles import ProfileSet
from planner.cluster import Cluster, cluster_from_dict
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.errors import HetplanError
from planner.report.compare import CompareRow, best_row
from planner.report.plan_view import stage_layout
from planner.report.scenario import edit_cluster

__all__ = ["SAME_PRICES", "WhatIf", "change_pct", "whatif", "whatif_lines"]

SAME_PRICES = "the same prices apply before, so $ figures compare"
"""The note a what-if adds when its --price edits also re-priced the original cluster."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatIf:
    edits: tuple[str, ...]
    """One line per applied edit."""
    before: CompareRow
    after: CompareRow
    cluster_after: dict[str, Any]
    """The edited cluster spec (validated; save it as YAML to keep the scenario)."""
    cluster_before: dict[str, Any] | None = None
    """The cluster the "before" plan was priced on: the original with the `--price` edits
    that name something in it (None: unchanged)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "edits": list(self.edits),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "change_pct": {name: pct for name, _, _, pct in whatif_lines(self) if pct is not None},
            "layout_before": _layout(self.before),
            "layout_after": _layout(self.after),
            "cluster_after": self.cluster_after,
            "cluster_before": self.cluster_before,
        }


def whatif(model: Any, cluster: Cluster, *, add: Sequence[str] = (), remove: Sequence[str] = (),
           price: Sequence[str] = (), network_gbps: float | None = None,
           partition: Sequence[str] = (), global_batch_size: int | None = None,
           objective: str = "throughput",
           framework: Framework = DEFAULT_FRAMEWORK,
           profiles: ProfileSet | None = None) -> WhatIf:
    """Best plan on `cluster` and on the edited cluster (edits as in `scenario.edit_cluster`,
    then `partition`: GPU types split into MIG slices, `planner.report.partition`).

    A `price` edit applies to both sides wherever it names a group or GPU type the original
    cluster has, so the $ figures compare plans, not price lists."""
    spec, notes = edit_cluster(cluster.spec, add=add, remove=remove, price=price,
                               network_gbps=network_gbps)
    before = cluster
    repriced = _reprice(cluster.spec, price)
    if repriced is not None:
        before = cluster_from_dict(repriced, "whatif scenario (before)")
        notes.append(SAME_PRICES)
    if partition:
        from planner.report.partition import partition_cluster

        spec, more = partition_cluster(spec, partition)
        notes += more
    edited = cluster_from_dict(spec, "whatif scenario")
    kwargs: dict[str, Any] = {"global_batch_size": global_batch_size, "objective": objective,
                              "framework": framework, "profiles": profiles}
    return WhatIf(edits=tuple(notes), before=best_row(model, cluster.name, before, **kwargs),
                  after=best_row(model, f"{cluster.name} (what-if)", edited, **kwargs),
                  cluster_after=edited.spec,
                  cluster_before=None if repriced is None else before.spec)


def _reprice(spec: dict[str, Any], price: Sequence[str]) -> dict[str, Any] | None:
    """`spec` with each price edit that names one of its groups or GPU types applied; None
    when none does. Edits naming only an added group are skipped: it has no "before"."""
    out = None
    for text in price:
        try:
            out, _ = edit_cluster(out or spec, price=[text])
        except HetplanError:
            continue
    return out


def change_pct(before: float | None, after: float | None) -> float | None:
    """(after − before) / before in %, None when either is unknown or before is 0."""
    if before is None or after is None or before == 0:
        return None
    return (after - before) / before * 100.0


def _layout(row: CompareRow) -> str:
    return stage_layout(row.plan) if row.plan is not None else ""


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def whatif_lines(w: WhatIf) -> list[tuple[str, str, str, float | None]]:
    """(metric, before, after, change %) rows: GPUs used per type, plan shape, speed and cost."""
    b, a = w.before, w.after
    rows: list[tuple[str, str, str, float | None]] = []
    types = list(dict.fromkeys([*b.gpus_available, *a.gpus_available]))
    for t in types:
        ub, ua = b.gpus_used.get(t, 0), a.gpus_used.get(t, 0)
        rows.append((f"{t} used", f"{ub}/{b.gpus_available.get(t, 0)}",
                     f"{ua}/{a.gpus_available.get(t, 0)}", change_pct(ub, ua)))
    for name, vb, va in (("stages", b.stages, a.stages), ("pipelines (DP)", b.pipelines,
                                                            a.pipelines),
                         ("micro-batch", b.micro_batch_size, a.micro_batch_size)):
        rows.append((name, str(vb), str(va), None))
    for name, vb, va, spec in (
        ("tokens/s", b.tokens_per_s, a.tokens_per_s, ",.0f"),
        ("iteration s", b.iteration_time_s, a.iteration_time_s, ".3f"),
        ("MFU", b.mfu, a.mfu, ".1%"),
        ("$/h (GPUs used)", b.usd_per_hour, a.usd_per_hour, ",.2f"),
        ("$/h (whole cluster)", b.cluster_usd_per_hour, a.cluster_usd_per_hour, ",.2f"),
        ("$/1M tokens", b.usd_per_million_tokens, a.usd_per_million_tokens, ".4f"),
    ):
        rows.append((name, _fmt(vb, spec), _fmt(va, spec), change_pct(vb, va)))
    return rows
