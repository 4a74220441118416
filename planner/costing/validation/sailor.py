"""Sailor (SOSP 2025) validation runs: OPT-350M and GPT-Neo-2.7B on Clariden GH200 and on the
MIT heterogeneous cluster (RTX-3090 / RTX-2080 Ti / Titan RTX, 8 per node, PCIe).

Each stage replica `Nx[GPU/tpT]` is one node running a TP group of T (Clariden: a whole node of
4; MIT: T of the node's 8). Pipeline i takes the i-th replica of every stage (Sailor's files
list replicas in the same order per stage). Micro-batches are split evenly over replicas.
Sailor trained in fp32 (TF32 on Hopper): see cost_models/profile_convert.py for the evidence;
we estimate at fp32. Layer units include the embedding and the head, as our chain does.

Two rows are excluded from the metrics (reported, marked): clariden GPT-NEO N4_D4, whose plan
file is a copy of an OPT-350M plan (26 units for a 34-unit model), and mit N3_D1, whose
measurement is repeated exactly by mit N6_D2 (same time, gradient time and memory to 5
digits). The copy is N3_D1's: its 5.46 s of data-parallel gradient reduction
(`red_grads_field`) cannot come from a plan with no data parallelism (the other two such
plans, N2_D1 and N4_D1, report 0.008 and 0.002 s), while N6_D2, three pipelines of two nodes
each, needs 5.4 s for its all-reduce by our model.
OPT-350M ties its LM head to the embedding; Sailor's Megatron-DeepSpeed keeps the default
(`TiedLayerSpec`), so the framework is `SAILOR_DEEPSPEED`, whose tied all-reduce runs per
pipeline.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from cost_models.profiles import ProfileSet
from planner.cluster import cluster_from_dict, load_cluster
from planner.costing.estimate import estimate
from planner.costing.published_stacks import SAILOR_DEEPSPEED
from planner.costing.validation.common import FileReport, Row, graph_for, summarise
from planner.errors import HetplanError
from planner.schema import Plan

__all__ = ["sailor_reports"]

_FILE = "sailor_measured_plans.csv"
_MODELS = {"OPT-350M": "opt-350m", "GPT-Neo-2.7B": "gpt-neo-2.7b"}
_EXCLUDED = {
    "clariden/GPT-NEO/N4/plan_config_N4_D4.json": "plan file is a copy of an OPT-350M plan",
    "mit/N3/plan_config_N3_D1.json": "measurement is mit/N6/plan_config_N6_D2.json's (see above)",
}
_REPLICA = re.compile(r"(\d+)x\[([^/\]]+)/tp(\d+)\]")


def _cluster_spec(base_name: str, replicas: list[tuple[str, int]]) -> dict:
    """One single-node group per replica, links as in the bundled cluster file."""
    base = load_cluster(base_name)
    by_gpu = {g.gpu.name: g for g in base.groups}
    from cost_models.catalog import get_gpu

    nodes = []
    for i, (gpu_name, _tp) in enumerate(replicas):
        g = by_gpu[get_gpu(gpu_name).name]
        nodes.append({"name": f"n{i}", "count": 1, "gpu": g.gpu.name,
                      "gpus_per_node": g.gpus_per_node, "intra_node": g.intra_node,
                      "inter_node_gbps": g.inter_node_gbps})
    return {"name": f"{base_name}-row", "nodes": nodes,
            "network": {"latency_us": base.latency_us}}


def _plan(rec: dict[str, str], n_layers: int) -> tuple[Plan, dict]:
    counts = [int(x) for x in rec["layers_per_stage(incl_embed/head_units)"].split("|")]
    if sum(counts) != n_layers:
        raise HetplanError(f"stages cover {sum(counts)} units, the model has {n_layers}")
    stages_txt = rec["stage_replicas(gpu_type x tp)"].split(";")
    per_stage: list[list[tuple[str, int]]] = []
    for txt in stages_txt:
        reps: list[tuple[str, int]] = []
        for n, gpu, tp in _REPLICA.findall(txt):
            reps.extend([(gpu, int(tp))] * int(n))
        per_stage.append(reps)
    dp = len(per_stage[0])
    if any(len(r) != dp for r in per_stage):
        raise HetplanError("stages have different replica counts")
    flat = [rep for stage in per_stage for rep in stage]
    base = "clariden-gh200" if rec["cluster"].startswith("Clariden") else "mit-het"
    cluster = cluster_from_dict(_cluster_spec(base, flat))
    mb, gbs = int(rec["micro_batch"]), int(rec["global_batch"])
    per_pipe, rem = divmod(gbs, dp * mb)
    if rem:
        raise HetplanError(f"global batch {gbs} does not split into {dp} × micro-batch {mb}")
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    pipelines, ranks = [], []
    node_of = {}
    for s, stage in enumerate(per_stage):
        for d, rep in enumerate(stage):
            node_of[(s, d)] = (f"n{s * dp + d}", rep)
    next_rank = 0
    stage_ranks: dict[tuple[int, int], list[int]] = {}
    for s in range(len(per_stage)):
        for d in range(dp):
            node, (gpu, tp) = node_of[(s, d)]
            stage_ranks[(s, d)] = list(range(next_rank, next_rank + tp))
            ranks.extend({"rank": next_rank + k, "node": node, "local_rank": k}
                         for k in range(tp))
            next_rank += tp
    gpu_of = {g.name: g.gpu.name for g in cluster.groups}
    sched = "1f1b" if per_pipe >= len(per_stage) else "gpipe"
    for d in range(dp):
        stages = []
        for s in range(len(per_stage)):
            node, (_gpu, tp) = node_of[(s, d)]
            stages.append({"layers": [bounds[s], bounds[s + 1]], "gpu": gpu_of[node], "tp": tp,
                           "ranks": stage_ranks[(s, d)]})
        pipelines.append({"microbatches": per_pipe, "stages": stages})
    plan = Plan.from_dict({"global_batch_size": gbs, "micro_batch_size": mb, "schedule": sched,
                           "pipelines": pipelines, "ranks": ranks}, where=rec["file"])
    return plan, {"cluster": cluster}


def sailor_reports(data_dir: Path, profiles: ProfileSet) -> list[FileReport]:
    groups: dict[str, list[Row]] = {"clariden": [], "mit": []}
    memory: dict[str, list[Row]] = {"clariden": [], "mit": []}
    with (data_dir / _FILE).open(newline="") as fh:
        for rec in csv.DictReader(fh):
            group = "clariden" if rec["cluster"].startswith("Clariden") else "mit"
            graph = graph_for(_MODELS[rec["model"]], precision="fp32")
            measured = float(rec["measured_iter_s(real)"])
            label = rec["file"]
            excluded = _EXCLUDED.get(rec["file"])
            try:
                plan, extra = _plan(rec, len(graph.layers))
            except HetplanError as exc:
                groups[group].append(Row(label, measured, None, used=False, note=str(exc)))
                continue
            est = estimate(graph, extra["cluster"], plan, profiles=profiles, precision="fp32",
                           framework=SAILOR_DEEPSPEED)
            note = excluded or ""
            if not est.feasible:
                note = (note + "; " if note else "") + "we predict OOM"
            groups[group].append(Row(label, measured, est.iteration_time_s,
                                     feasible=est.feasible, used=excluded is None, note=note,
                                     framework=SAILOR_DEEPSPEED.name))
            memory[group].append(Row(label, float(rec["measured_peak_mem_GiB(max_mem)"]),
                              max(st.peak_memory_gib for st in est.stages),
                              used=excluded is None, note=excluded or ""))
    target = "MAPE <= 15 %, Spearman >= 0.85"
    out = [summarise(_FILE, g, "s/iter", rows, target) for g, rows in groups.items()]
    out.append(summarise(_FILE, "all", "s/iter", groups["clariden"] + groups["mit"], target))
    for g, rows in memory.items():
        out.append(summarise(_FILE, f"peak memory {g}", "GiB", rows, "informational",
                             ranking=False))
    return out
