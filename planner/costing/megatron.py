"""`megatron_plan`: the plan a Megatron-style config (tp, pp, dp, micro-batch) describes.

Ranks follow the cluster file's node order in Megatron's order: TP fastest, then CP, then DP,
then PP, so stage s holds ranks [s·n·tp, (s+1)·n·tp) with n = dp·cp pipelines, and pipeline
d's stage s the TP group [s·n·tp + d·tp, s·n·tp + (d+1)·tp); pipelines [k·cp, (k+1)·cp) are
one context-parallel block (the same samples, the sequence split over them), so a cp group
of tp·cp ≤ GPUs per node stays inside a node. The plan uses the first tp·cp·pp·dp GPU slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.cluster.model import Cluster
from planner.costing.resolve import resolve_model
from planner.errors import HetplanError, SpecError
from planner.limits import MAX_MICROBATCHES, limit_text
from planner.schema import Pipeline, Plan, RankInfo, Stage
from planner.schema_groups import zero_stage_of

__all__ = ["even_split", "megatron_plan"]


def even_split(num_layers: int, chunks: int) -> list[int]:
    """Layers per chunk: the L blocks as even as possible (extra blocks to the middle chunks),
    the embedding on the first chunk and the head on the last."""
    blocks = num_layers - 2
    if chunks < 1 or blocks < chunks:
        raise HetplanError(f"{blocks} transformer blocks cannot fill {chunks} pipeline chunks; "
                           "use fewer stages or virtual stages")
    base, extra = divmod(blocks, chunks)
    counts = [base] * chunks
    order = list(range(1, chunks - 1)) + [0, chunks - 1] if chunks > 2 else list(range(chunks))
    for i in order[:extra]:
        counts[i] += 1
    counts[0] += 1
    counts[-1] += 1
    return counts


def _spec_dict(model: Any) -> dict[str, Any] | None:
    plan_model = getattr(model, "plan_model", None)
    if callable(plan_model):
        return plan_model()  # a spec, or a user's module's layer table (graph.embedded)
    spec = getattr(model, "spec", None)
    if spec is None:
        return None
    return spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)


def _check_ep(graph: Any, ep: int, dp: int, cp: int = 1) -> None:
    """Expert parallelism runs over consecutive pipelines, data- or context-parallel
    (Megatron-Core's EP ⊆ DP × CP): routing is per token, whichever sequence part it is."""
    if ep == 1:
        return
    experts = max((layer.num_experts for layer in graph.layers), default=0)
    if ep < 1 or not experts:
        raise HetplanError(f"--ep {ep}: model {graph.name} has no experts; use --ep 1"
                           if experts == 0 else f"--ep must be >= 1, got {ep}")
    if experts % ep:
        raise HetplanError(f"--ep {ep} does not divide the {experts} experts; pick a divisor")
    if dp * cp % ep:
        what = f"--dp {dp}" if cp == 1 else f"dp × cp = {dp * cp}"
        raise HetplanError(f"--ep {ep} must divide {what}: experts are split over groups "
                           "of ep consecutive pipelines")


def _tp_problem(layer: Any, tp: int) -> str:
    """Which of the layer's dimensions `tp` fails, named as what it is: a block's heads, KV
    heads and FFN width (tp must divide them), or an embedding / head's vocabulary (split in
    padded rows, so tp only has to be at most its size)."""
    if layer.tp_dims:
        dims = " / ".join(str(d) for d in layer.tp_dims)
        return (f"--tp {tp} does not divide layer {layer.name}'s heads, KV heads and FFN width "
                f"({dims}; tp must divide {layer.max_tp}); pick a divisor of it")
    if getattr(layer, "vocab_size", 0):
        return (f"--tp {tp} is more than layer {layer.name}'s vocabulary of {layer.vocab_size} "
                f"rows (each TP rank needs at least one); pick --tp at most {layer.max_tp}")
    return (f"--tp {tp} is more than layer {layer.name}'s largest TP degree {layer.max_tp}; "
            f"pick --tp at most {layer.max_tp}")


def megatron_plan(model: Any, cluster: Cluster, *, tp: int, pp: int, dp: int, micro_batch: int,
                  global_batch: int, recompute: str = "none", sequence_parallel: bool = False,
                  schedule: str = "1f1b", virtual_stages: int = 1,
                  layers_per_stage: Sequence[int] | None = None, zero1: bool = False,
                  ep: int = 1, zero: int = 0, cp: int = 1) -> Plan:
    """Build the plan for a Megatron-style config over `cluster`'s nodes (see module doc)."""
    graph, _ = resolve_model(model)
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("micro_batch", micro_batch),
                        ("global_batch", global_batch), ("virtual_stages", virtual_stages),
                        ("cp", cp)):
        if value < 1:
            raise HetplanError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if virtual_stages > 1 and schedule != "interleaved":
        raise HetplanError(f"--virtual-stages {virtual_stages} needs --schedule interleaved")
    # Blocks split heads, KV heads and the FFN evenly: tp must divide their gcd (max_tp);
    # the embedding and head pad the vocabulary, so any tp up to max_tp works there.
    bad = [layer for layer in graph.layers
           if layer.max_tp < tp or (layer.kind == "block" and layer.max_tp % tp)]
    if bad:
        raise HetplanError(_tp_problem(bad[0], tp))
    _check_ep(graph, ep, dp, cp)
    if cp > 1 and graph.seq_len % (2 * cp):
        raise HetplanError(f"--cp {cp}: the sequence length {graph.seq_len} must divide into "
                           f"2 × cp = {2 * cp} equal chunks (zig-zag); pick another --cp or "
                           "--seq-len")
    world = tp * cp * pp * dp
    slots = [(node.name, local) for node in cluster.nodes
             for local in range(node.group.gpus_per_node)]
    if world > len(slots):
        cp_text = f" × cp ({cp})" if cp > 1 else ""
        raise HetplanError(f"tp ({tp}){cp_text} × pp ({pp}) × dp ({dp}) = {world} GPUs but "
                           f"cluster {cluster.name} has {len(slots)}")
    per_pipe, rem = divmod(global_batch, dp * micro_batch)
    if rem or per_pipe < 1:
        raise HetplanError(f"global batch {global_batch} is not a multiple of dp ({dp}) × "
                           f"micro-batch ({micro_batch}) = {dp * micro_batch}")
    if per_pipe > MAX_MICROBATCHES:
        raise HetplanError(f"global batch {global_batch} over dp ({dp}) × micro-batch "
                           f"({micro_batch}) is {per_pipe:,} micro-batches per pipeline, above "
                           f"hetplan's limit of {limit_text(MAX_MICROBATCHES)}; raise "
                           "--micro-batch or lower --global-batch")
    chunks = pp * virtual_stages
    n_layers = len(graph.layers)
    if layers_per_stage is None:
        counts = even_split(n_layers, chunks)
    else:
        counts = list(layers_per_stage)
        if any(c < 1 for c in counts):
            raise HetplanError(
                f"--layers-per-stage {','.join(map(str, counts))}: {min(counts)} layers in a "
                "chunk; every chunk needs at least 1")
        if len(counts) != chunks or sum(counts) != n_layers:
            raise HetplanError(
                f"--layers-per-stage {','.join(map(str, counts))}: need {chunks} positive counts "
                f"(pp {pp} × virtual stages {virtual_stages}) summing to {n_layers} layers "
                f"(embedding + {n_layers - 2} blocks + head); they sum to {sum(counts)}")
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    group_gpu = {node.name: node.group.gpu.name for node in cluster.nodes}
    pipelines = []
    n_pipes = dp * cp
    for d in range(n_pipes):
        stages = []
        for j in range(chunks):
            s = j % pp
            ranks = tuple(s * n_pipes * tp + d * tp + k for k in range(tp))
            node_names = {slots[r][0] for r in ranks}
            if len(node_names) > 1:
                raise HetplanError(f"TP group of pipeline {d} stage {s} (ranks {ranks[0]}-"
                                   f"{ranks[-1]}) spans nodes {sorted(node_names)}; pick a --tp "
                                   "that divides the GPUs per node")
            stages.append(Stage(layers=(bounds[j], bounds[j + 1]),
                                gpu=group_gpu[slots[ranks[0]][0]], tp=tp, ranks=ranks,
                                recompute=recompute, ep=ep if ep > 1 else None,
                                cp=cp if cp > 1 else None))
        pipelines.append(Pipeline(microbatches=per_pipe, stages=tuple(stages)))
    ranks_table = tuple(RankInfo(rank=r, node=slots[r][0], local_rank=slots[r][1])
                        for r in range(world))
    data = {
        "model": _spec_dict(model), "cluster": dict(cluster.spec) if cluster.spec else None,
        "global_batch_size": global_batch, "micro_batch_size": micro_batch,
        "schedule": schedule, "virtual_stages": virtual_stages,
        "sequence_parallel": sequence_parallel, "zero": zero_stage_of(zero, zero1),
        "pipelines": [p.model_dump() for p in pipelines],
        "ranks": [r.model_dump() for r in ranks_table],
    }
    try:
        return Plan.from_dict(data, where="megatron plan")
    except SpecError as exc:
        raise HetplanError(str(exc)) from None
