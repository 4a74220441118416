"""Cost of one device group (a TP group) running a contiguous range of layers.

`layer_cost_table` turns a LayerGraph into per-layer cost arrays for one (GPU type, TP,
micro-batch, recompute, precision, sequence parallelism, intra-node link) combination, with
prefix sums, and caches them: `stage_cost` over any layer range is then O(1). The search
calls it for many combinations; the estimate for every stage of a plan.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import accumulate

from cost_models.comm import Link, allgather_s
from cost_models.compute import adam_step_s
from cost_models.gpu import GpuSpec
from cost_models.memory import optimizer_bytes_per_param, state_bytes_per_param
from cost_models.moe import DEFAULT_CAPACITY_FACTOR
from cost_models.profiles import ProfileSet, default_profiles
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.layer_ac import every_nth_block_stage
from planner.costing.layer_cost import kv_bytes_per_sequence, layer_costs, tp_split
from planner.costing.links import link_of_kind
from planner.graph.layers import Layer, LayerGraph

__all__ = ["LayerCostTable", "StageCost", "kv_bytes_per_sequence", "layer_cost_table",
           "stage_cost", "tp_split"]


@dataclass(frozen=True, slots=True)
class StageCost:
    """One device group (TP group) running layers [start, end) for ONE micro-batch."""

    fwd_s: float
    """Forward compute + TP communication."""
    bwd_s: float
    """Backward (activation + weight gradients) + recomputation + TP communication."""
    bwd_weight_s: float
    """The weight-gradient part of `bwd_s` (zero-bubble style accounting)."""
    params_per_gpu: int
    static_bytes_per_gpu: float
    """Weights + gradients + optimizer state on one GPU, before ZeRO-1 sharding."""
    optimizer_bytes_per_gpu: float
    """The part of `static_bytes_per_gpu` that ZeRO-1 shards over DP."""
    activation_bytes_per_microbatch: float
    """Activations one in-flight micro-batch holds on one GPU of the group."""
    p2p_bytes: float
    """The activation sent to the next stage per micro-batch: the WHOLE tensor (all TP ranks
    together); each TP rank sends 1/tp of it (Megatron's scatter-gather p2p)."""
    optimizer_step_s: float
    """Adam step for this GPU's parameters (memory-bound), unsharded."""
    recompute_transient_bytes: float = 0.0
    """Extra bytes one layer's passes need at once, the largest over the stage's layers (peaks
    of different phases do not add): a block's recomputed activations and under context
    parallelism the gathered K/V's; the head's loss buffers (vocab_cost.loss_transient_bytes)."""
    recompute_s: float = 0.0
    """The part of `bwd_s` spent re-running forward work (drawn apart in Gantt charts)."""
    expert_optimizer_bytes_per_gpu: float = 0.0
    """The part of `optimizer_bytes_per_gpu` in routed experts: ZeRO-1 shards it over the
    expert-data-parallel group (DP / ep), not over DP."""
    context_activation_bytes_per_microbatch: float = 0.0
    """The part of `activation_bytes_per_microbatch` that is other cp ranks' K/V, gathered
    and saved for the backward (cost_models/context.py: gathered_kv_memory_bytes)."""
    context_transient_bytes: float = 0.0
    """The part of `recompute_transient_bytes` that is the gathered K/V's gradients, the
    all-reduce's copy (and under full recompute the re-gathered K/V)."""


@dataclass(frozen=True, slots=True)
class LayerCostTable:
    """Prefix sums (length L+1) of per-layer costs for one configuration."""

    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    bwd_weight_s: tuple[float, ...]
    params: tuple[float, ...]
    activation_bytes: tuple[float, ...]
    update_s: tuple[float, ...]
    transient_bytes: tuple[float, ...]
    """Per layer (not a prefix sum): the transient of that layer (recompute, cp K/V, loss)."""
    output_bytes: tuple[float, ...]
    """Per layer (not a prefix sum): bytes of the layer's output for one micro-batch."""
    state_bytes_per_param: float
    optimizer_bytes_per_param: float
    recompute_s: tuple[float, ...] = (0.0,)
    """Prefix sums of the recompute part of `bwd_s`."""
    expert_params: tuple[float, ...] = ()
    """Prefix sums of routed-expert parameters per GPU (empty: none)."""
    ties: tuple[tuple[int, int, float, float], ...] = ()
    """(layer, owner layer, parameters per GPU, Adam step s) of each tied weight a layer uses
    but another counts: a stage holding the layer and not its owner keeps a copy."""
    context_activation_bytes: tuple[float, ...] = ()
    """Prefix sums of the gathered K/V part of `activation_bytes` (empty: none)."""
    context_transient_bytes: tuple[float, ...] = ()
    """Per layer: the gathered K/V part of `transient_bytes` (empty: none)."""
    sp_edge_s: float = 0.0
    """One all-gather of a micro-batch's whole hidden states over TP: hetplan's runtime runs
    one at each edge of a chunk's run of sequence-parallel blocks, in the forward after the
    run (`ChunkModule`'s `gather_sequence`) and in the backward before it (the gradient of
    `scatter_sequence`, runtime/seqpar.py); 0 without SP or where the framework keeps the
    sequence split into the head."""
    blocks: tuple[float, ...] = ()
    """Prefix counts of the transformer blocks, for `sp_edge_s` (empty: not needed)."""

    def sp_edges_s(self, start: int, end: int) -> float:
        """Seconds of the SP edge all-gathers layers [start, end) run in each pass: one if
        they hold a block (a chunk's blocks are one run), else none."""
        if self.sp_edge_s and self.blocks and self.blocks[end] > self.blocks[start]:
            return self.sp_edge_s
        return 0.0

    def tied_copy(self, start: int, end: int) -> tuple[float, float]:
        """(parameters per GPU, Adam step s) of the tied copies layers [start, end) hold."""
        params = update = 0.0
        for layer, owner, p, u in self.ties:
            if start <= layer < end and not start <= owner < end:
                params, update = params + p, update + u
        return params, update

    def stage(self, start: int, end: int) -> StageCost:
        if not 0 <= start < end < len(self.fwd_s):
            raise ValueError(f"layer range [{start}, {end}) is outside the graph's "
                             f"{len(self.fwd_s) - 1} layers")
        copy_params, copy_update = self.tied_copy(start, end)
        params = self.params[end] - self.params[start] + copy_params
        # The layer whose backward needs the most at once, and its context-parallel part.
        worst = max(range(start, end), key=self.transient_bytes.__getitem__)
        ctx_act = (self.context_activation_bytes[end] - self.context_activation_bytes[start]
                   if self.context_activation_bytes else 0.0)
        edge = self.sp_edges_s(start, end)
        return StageCost(
            fwd_s=self.fwd_s[end] - self.fwd_s[start] + edge,
            bwd_s=self.bwd_s[end] - self.bwd_s[start] + edge,
            bwd_weight_s=self.bwd_weight_s[end] - self.bwd_weight_s[start],
            params_per_gpu=round(params),
            static_bytes_per_gpu=params * self.state_bytes_per_param,
            optimizer_bytes_per_gpu=params * self.optimizer_bytes_per_param,
            activation_bytes_per_microbatch=(self.activation_bytes[end]
                                             - self.activation_bytes[start]),
            p2p_bytes=self.output_bytes[end - 1],
            optimizer_step_s=self.update_s[end] - self.update_s[start] + copy_update,
            recompute_transient_bytes=self.transient_bytes[worst],
            recompute_s=self.recompute_s[end] - self.recompute_s[start],
            expert_optimizer_bytes_per_gpu=(
                (self.expert_params[end] - self.expert_params[start])
                * self.optimizer_bytes_per_param if self.expert_params else 0.0),
            context_activation_bytes_per_microbatch=ctx_act,
            context_transient_bytes=(self.context_transient_bytes[worst]
                                     if self.context_transient_bytes else 0.0),
        )


def _intra_link(gpu: GpuSpec, gb_per_s: float | None, kind: str | None) -> Link:
    bw = gpu.intra_node_gb_per_s if gb_per_s is None else gb_per_s
    return link_of_kind(kind or gpu.intra_node_link, bw)


_CONTENT_FIELDS = tuple(f.name for f in fields(Layer) if f.name not in ("index", "name"))
_CACHE: dict[tuple, tuple[LayerGraph, ProfileSet, LayerCostTable]] = {}
_CACHE_MAX = 20_000


_CONTENTS: dict[int, tuple[LayerGraph, tuple[tuple, ...]]] = {}


def _contents(graph: LayerGraph) -> tuple[tuple, ...]:
    """Each layer's contents (what its costs depend on), worked out once per graph: the
    search asks for hundreds of tables of one graph (cached on its identity, as `_CACHE`)."""
    hit = _CONTENTS.get(id(graph))
    if hit is None or hit[0] is not graph:
        if len(_CONTENTS) >= 64:
            _CONTENTS.clear()
        hit = _CONTENTS[id(graph)] = (graph, tuple(
            tuple(getattr(layer, f) for f in _CONTENT_FIELDS) for layer in graph.layers))
    return hit[1]


def _ties(graph: LayerGraph, gpu: GpuSpec, tp: int,
          fw: Framework) -> tuple[tuple[int, int, float, float], ...]:
    """Tied weights as `LayerCostTable.ties`: the copy splits over TP like the layer using it."""
    out = []
    for i, layer in enumerate(graph.layers):
        if layer.tied_params > 0 and 0 <= layer.tied_to < i:
            per_gpu = layer.tied_params / (tp if tp_split(layer, fw, tp) else 1)
            out.append((i, layer.tied_to, per_gpu, adam_step_s(per_gpu, gpu)))
    return tuple(out)


def layer_cost_table(graph: LayerGraph, gpu: GpuSpec, tp: int, micro_batch: int,
                     recompute: str, *, precision: str, sequence_parallel: bool = False,
                     intra_node_gb_per_s: float | None = None, intra_node_link: str | None = None,
                     profiles: ProfileSet | None = None,
                     framework: Framework = DEFAULT_FRAMEWORK, ep: int = 1,
                     ep_link: Link | None = None,
                     capacity_factor: float = DEFAULT_CAPACITY_FACTOR, cp: int = 1,
                     cp_link: Link | None = None) -> LayerCostTable:
    """Per-layer cost prefix sums for one configuration (cached on the graph's identity).

    `ep` / `ep_link`: expert-parallel degree and its all-to-all link (mixture-of-experts
    layers); `capacity_factor`: the busiest expert's load over the balanced one; `cp` /
    `cp_link`: context-parallel degree and its K/V ring's link."""
    if tp < 1 or micro_batch < 1 or cp < 1:
        raise ValueError(f"tp ({tp}), micro_batch ({micro_batch}) and cp ({cp}) must be >= 1")
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")
    profiles = default_profiles() if profiles is None else profiles
    key = (id(graph), gpu.name, tp, micro_batch, recompute, precision, sequence_parallel,
           intra_node_gb_per_s, intra_node_link, id(profiles), framework, ep, ep_link,
           capacity_factor, cp, cp_link)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is graph and hit[1] is profiles:
        return hit[2]
    link = _intra_link(gpu, intra_node_gb_per_s, intra_node_link)
    # A model's blocks are mostly identical: cost each distinct layer once (a layer's costs
    # depend on its contents, never on its position or name).
    same: dict[tuple, tuple[float, ...]] = {}
    rows = []
    for layer, contents in zip(graph.layers, _contents(graph), strict=True):
        if contents not in same:
            same[contents] = layer_costs(layer, graph, gpu, tp, micro_batch, recompute,
                                          precision, sequence_parallel, link, profiles, framework,
                                          (ep, ep_link, capacity_factor), (cp, cp_link))
        rows.append(same[contents])
    cols = list(zip(*rows, strict=True))
    blocks = [1.0 if layer.kind == "block" else 0.0 for layer in graph.layers]
    edge = 0.0
    if sequence_parallel and tp > 1 and framework.sp_edge_gathers and any(blocks):
        whole = max(layer.output_bytes for layer in graph.layers if layer.kind == "block")
        edge = allgather_s(micro_batch / cp * whole, tp, link)

    def prefix(xs: tuple[float, ...]) -> tuple[float, ...]:
        return (0.0, *accumulate(xs))

    table = LayerCostTable(
        fwd_s=prefix(cols[0]), bwd_s=prefix(cols[1]), bwd_weight_s=prefix(cols[2]),
        params=prefix(cols[3]), activation_bytes=prefix(cols[4]), update_s=prefix(cols[5]),
        transient_bytes=tuple(cols[6]),
        output_bytes=tuple(micro_batch / cp * layer.output_bytes for layer in graph.layers),
        state_bytes_per_param=state_bytes_per_param(precision),
        optimizer_bytes_per_param=optimizer_bytes_per_param(precision),
        recompute_s=prefix(cols[7]),
        ties=_ties(graph, gpu, tp, framework),
        expert_params=prefix(cols[8]) if any(cols[8]) else (),
        context_activation_bytes=prefix(cols[9]) if any(cols[9]) else (),
        context_transient_bytes=tuple(cols[10]) if any(cols[10]) else (),
        sp_edge_s=edge, blocks=prefix(tuple(blocks)) if edge else (),
    )
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (graph, profiles, table)
    return table


def stage_cost(graph: LayerGraph, start: int, end: int, gpu: GpuSpec, tp: int, micro_batch: int,
               recompute: str, *, precision: str, sequence_parallel: bool = False,
               intra_node_gb_per_s: float | None = None, intra_node_link: str | None = None,
               profiles: ProfileSet | None = None,
               framework: Framework = DEFAULT_FRAMEWORK, ep: int = 1,
               ep_link: Link | None = None,
               capacity_factor: float = DEFAULT_CAPACITY_FACTOR, cp: int = 1,
               cp_link: Link | None = None) -> StageCost:
    """Cost of layers [start, end) on a TP group of `tp` GPUs of type `gpu`, one micro-batch.

    `intra_node_gb_per_s` / `intra_node_link` describe the TP group's link (default: the GPU's
    usual one); `profiles` defaults to the shipped profile files (pass `ProfileSet()` for the
    analytic model alone); `framework` describes the executing framework (default: hetplan's
    runtime, see `planner.costing.framework`); `cp` splits each sequence over `cp` GPUs
    (context parallelism) whose K/V ring runs over `cp_link`.
    """
    def table(mode: str) -> LayerCostTable:
        return layer_cost_table(
            graph, gpu, tp, micro_batch, mode, precision=precision,
            sequence_parallel=sequence_parallel, intra_node_gb_per_s=intra_node_gb_per_s,
            intra_node_link=intra_node_link, profiles=profiles, framework=framework, ep=ep,
            ep_link=ep_link, capacity_factor=capacity_factor, cp=cp, cp_link=cp_link)

    if recompute == "selective" and framework.sac_policy == "torchtitan-layer":
        # torchtitan's layer-level checkpointing: the stage's own every-N-th blocks (layer_ac).
        return every_nth_block_stage(graph, table("none"), table("full"), start, end,
                                     framework.sac_every)
    return table(recompute).stage(start, end)
