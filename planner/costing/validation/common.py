"""Shared records and helpers of the accuracy report."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from planner.costing.validation.metrics import mape, spearman, top1_regret
from planner.graph.layers import LayerGraph

__all__ = ["FileReport", "Row", "graph_for", "per_framework_reports", "summarise"]


@dataclass(frozen=True, slots=True)
class Row:
    """One measured configuration and our prediction of the same quantity."""

    label: str
    measured: float | None
    """None: the run failed or ran out of memory."""
    predicted: float | None
    """None: the configuration cannot be expressed (the note says why)."""
    feasible: bool = True
    """Our memory verdict for the configuration."""
    used: bool = True
    """Counted in the metrics (False: excluded, the note says why)."""
    note: str = ""
    framework: str = ""
    """The framework record the row was priced with (`per_framework_reports`)."""
    peak_gib: float | None = None
    """Our priced peak memory of the fullest GPU, GiB (None: not priced)."""


@dataclass(frozen=True, slots=True)
class FileReport:
    file: str
    group: str
    quantity: str
    """What the rows compare, e.g. `s/iter` or `tokens/s/GPU`."""
    lower_is_better: bool
    rows: tuple[Row, ...]
    target: str
    mape_pct: float = math.nan
    spearman: float = math.nan
    top1_regret_pct: float = math.nan
    counted: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def r(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 4)

        return {
            "file": self.file, "group": self.group, "quantity": self.quantity,
            "target": self.target, "rows_counted": self.counted, "mape_pct": r(self.mape_pct),
            "spearman": r(self.spearman), "top1_regret_pct": r(self.top1_regret_pct),
            "rows": [{"label": x.label, "measured": x.measured,
                      "predicted": None if x.predicted is None else round(x.predicted, 6),
                      "feasible": x.feasible, "used": x.used, "note": x.note}
                     for x in self.rows],
        }


def summarise(file: str, group: str, quantity: str, rows: list[Row], target: str,
              lower_is_better: bool = True, ranking: bool = True) -> FileReport:
    used = [x for x in rows if x.used and x.measured is not None and x.predicted is not None]
    pred = [x.predicted for x in used]
    meas = [x.measured for x in used]
    return FileReport(
        file=file, group=group, quantity=quantity, lower_is_better=lower_is_better,
        rows=tuple(rows), target=target, counted=len(used),
        mape_pct=mape(pred, meas),  # type: ignore[arg-type]
        spearman=spearman(pred, meas) if ranking else math.nan,  # type: ignore[arg-type]
        top1_regret_pct=(top1_regret(pred, meas, lower_is_better)  # type: ignore[arg-type]
                         if ranking else math.nan))


@lru_cache(maxsize=64)
def _graph(spec_json: str) -> LayerGraph:
    from planner.graph.extract import extract
    from planner.graph.spec import ModelSpec

    return extract(ModelSpec.from_dict(json.loads(spec_json), where="validation model"))


def graph_for(spec: dict[str, Any] | str, **changes: Any) -> LayerGraph:
    """The LayerGraph of a zoo model name or spec dict, with fields changed (e.g. precision)."""
    if isinstance(spec, str):
        from planner.graph.load_spec import load_model_spec

        spec = load_model_spec(spec).to_dict()
    data = dict(spec)
    training = dict(data.get("training") or {})
    for key in ("precision", "global_batch_size"):
        if key in changes:
            training[key] = changes.pop(key)
    data.update(changes)
    data["training"] = training
    return _graph(json.dumps(data, sort_keys=True))


def per_framework_reports(reports: list[FileReport]) -> list[FileReport]:
    """One report per framework record over every counted timing row of `reports` (a file's
    overall group, which repeats its sub-groups, and peak memory are left out), so a
    framework's MAPE covers all the files it priced."""
    by_fw: dict[str, list[Row]] = {}
    timing = [r for r in reports if not r.group.startswith("peak memory")]
    split = {r.file for r in timing if r.group != "all"}  # their "all" repeats the groups
    for rep in timing:
        if rep.group == "all" and rep.file in split:
            continue
        for row in rep.rows:
            if row.framework:
                by_fw.setdefault(row.framework, []).append(row)
    return [summarise("per framework", name, "relative", rows, "informational",
                      ranking=False) for name, rows in sorted(by_fw.items())]
