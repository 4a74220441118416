"""AMP (NeurIPS 2022) measured plans: GPT-2-medium-like on 16 × T4 and on 12 × V100 + 4 × T4.

AMP counts 30 layer units: 0 embedding, 1 a no-op, 2-25 the 24 transformer layers, 26-29 the
head (final norm, logits, loss). Our chain is embed (0), layers.0-23 (1-24), head (25). A stage
boundary at unit b maps to chain index 0 for b = 0, 1 for b in {1, 2} (the no-op rides with the
embedding), b - 1 for 2 <= b <= 26; a boundary inside the head (27-29) or two boundaries that
map to the same index (a stage holding only the no-op) cannot be expressed: reported, not
counted (all such rows failed or ran out of memory in AMP's runs anyway).

Ranks are Megatron/DeepSpeed order (model fastest, then data, then pipe) over the cluster files
amp-het (3 V100 nodes first, the T4 node last, as AMP's het_cluster.py lists them) and amp-t4.
With fewer micro-batches than stages we simulate GPipe (1F1B then degenerates to it).
The framework is `AMP_DEEPSPEED_MEGATRON`: AMP ran DeepSpeed-Megatron v1.1.5 (vocab-parallel
embedding and logits, masked softmax over the full s×s scores, fp16 tied-embedding all-reduce
between each pipeline's first and last stage).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cost_models.profiles import ProfileSet
from planner.cluster import load_cluster
from planner.cluster.model import Cluster
from planner.costing.estimate import estimate
from planner.costing.megatron import megatron_plan
from planner.costing.published_stacks import AMP_DEEPSPEED_MEGATRON
from planner.costing.validation.common import FileReport, Row, graph_for, summarise
from planner.errors import HetplanError
from planner.schema import Plan

__all__ = ["AmpRun", "amp_reports", "amp_runs", "unit_boundary_to_chain"]

_FILE = "amp_measured_plans.csv"
_CLUSTERS = {"homogeneous": "amp-t4", "het_cluster": "amp-het"}
_TARGETS = {"homogeneous": "MAPE <= 15 %, Spearman >= 0.85",
            "het_cluster": "Spearman >= 0.85, top-1 regret <= 3 %"}


def unit_boundary_to_chain(b: int) -> int | None:
    """Chain index where a stage starting at AMP unit `b` starts (None: inside the head)."""
    if b == 0:
        return 0
    if b <= 2:
        return 1
    if b <= 26:
        return b - 1
    return 26 if b == 30 else None


def _layers_per_stage(bounds: list[int]) -> list[int] | None:
    chain = [unit_boundary_to_chain(b) for b in bounds]
    if any(c is None for c in chain):
        return None
    counts = [b - a for a, b in zip(chain[:-1], chain[1:], strict=True)]  # type: ignore[operator]
    return counts if all(c > 0 for c in counts) else None


@dataclass(frozen=True)
class AmpRun:
    """One row of amp_measured_plans.csv as a plan on our cluster files."""

    experiment: str
    label: str
    measured_s: float | None
    status: str
    micro_batch: int
    tp: int
    pp: int
    dp: int
    plan: Plan | None
    """None when the row cannot be expressed (`note` says why)."""
    cluster: Cluster
    note: str = ""


def amp_runs(data_dir: Path,
             clusters: dict[str, str | Cluster] | None = None) -> Iterator[AmpRun]:
    """Every measured AMP configuration, in file order. `clusters` maps an experiment to a
    cluster name or Cluster (default: amp-t4 and amp-het)."""
    graph = graph_for("gpt2-amp")
    chosen: dict[str, str | Cluster] = {**_CLUSTERS, **(clusters or {})}
    resolved = {k: v if isinstance(v, Cluster) else load_cluster(v) for k, v in chosen.items()}
    with (data_dir / _FILE).open(newline="") as fh:
        for rec in csv.DictReader(fh):
            exp = rec["experiment"]
            mb, tp, pp, dp = (int(rec[k]) for k in ("micro_batch", "tp", "pp", "dp"))
            bounds = json.loads(rec["layer_partition_boundaries(30_units)"])
            measured = float(rec["measured_s_per_iter"]) if rec["measured_s_per_iter"] else None
            base = dict(experiment=exp, label=f"mb{mb} tp{tp} pp{pp} dp{dp} {bounds}",
                        measured_s=measured, status=rec["status"], micro_batch=mb, tp=tp,
                        pp=pp, dp=dp, cluster=resolved[exp])
            counts = _layers_per_stage(bounds)
            if counts is None:
                yield AmpRun(**base, plan=None, note="partition not expressible on our chain")
                continue
            per_pipe = 32 // (dp * mb)
            try:
                plan = megatron_plan(graph, base["cluster"], tp=tp, pp=pp, dp=dp,
                                     micro_batch=mb, global_batch=32, layers_per_stage=counts,
                                     schedule="1f1b" if per_pipe >= pp else "gpipe")
            except HetplanError as exc:
                yield AmpRun(**base, plan=None, note=str(exc))
                continue
            yield AmpRun(**base, plan=plan)


def amp_reports(data_dir: Path, profiles: ProfileSet) -> list[FileReport]:
    graph = graph_for("gpt2-amp")
    rows: dict[str, list[Row]] = {k: [] for k in _CLUSTERS}
    for run in amp_runs(data_dir):
        if run.plan is None:
            rows[run.experiment].append(Row(run.label, run.measured_s, None, used=False,
                                            note=run.note))
            continue
        est = estimate(graph, run.cluster, run.plan, profiles=profiles,
                       framework=AMP_DEEPSPEED_MEGATRON)
        note = "" if run.measured_s is not None else run.status
        if not est.feasible:
            note = (note + "; " if note else "") + "we predict OOM"
        rows[run.experiment].append(Row(run.label, run.measured_s, est.iteration_time_s,
                                        feasible=est.feasible, note=note,
                                        framework=AMP_DEEPSPEED_MEGATRON.name))
    return [summarise(_FILE, exp, "s/iter", rows[exp], _TARGETS[exp]) for exp in _CLUSTERS]
