"""Cost of ONE layer on one TP group for one micro-batch: compute, TP / expert / context
communication, measured profiles, recomputation, activation and recompute-transient bytes.

`planner.costing.stage_cost` sums these rows into prefix tables, so any layer range is O(1).
"""

from __future__ import annotations

from cost_models.attention import attention_scale_on
from cost_models.comm import Link, allgather_s, allreduce_s
from cost_models.compute import LayerWork, adam_step_s, gemm_s, layer_compute_s, memory_s
from cost_models.context import gathered_kv_memory_bytes, ring_attention_exposed_s
from cost_models.efficiency import KERNELS_PER_BLOCK_FWD, constants_for
from cost_models.fusion import fused_traffic_ratio
from cost_models.gpu import GpuSpec
from cost_models.memory import activation_bytes_per_gpu
from cost_models.moe import DEFAULT_CAPACITY_FACTOR
from cost_models.profiles import ProfileSet
from cost_models.te_activations import te_block_replicated_bytes, te_block_saved_bytes
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.costing.layer_gemms import layer_gemm_factors
from planner.costing.moe_a2a import moe_a2a_s, routed_load_factor
from planner.costing.moe_tp_comm import hetplan_moe_tp_comm_s
from planner.costing.sac_cost import sac_block_costs
from planner.costing.vocab_cost import (
    head_hidden_saved_bytes,
    head_split_bytes,
    loss_transient_bytes,
    vocab_memory_share,
    vocab_tp_comm_s,
    whole_params,
)
from planner.graph.layers import Layer, LayerGraph

__all__ = ["kv_bytes_per_sequence", "layer_costs", "params_per_gpu", "tp_split"]

_KERNELS = {"embedding": 4, "block": KERNELS_PER_BLOCK_FWD, "head": 10,
            "other": KERNELS_PER_BLOCK_FWD}


def tp_split(layer: Layer, fw: Framework = DEFAULT_FRAMEWORK, tp: int = 1) -> bool:
    """Whether a TP group of `tp` splits the layer (its parameters and GEMMs divide by TP) or
    every TP rank holds it whole: blocks always split; the embedding and head under a
    vocab-parallel framework that pads the vocabulary, or when `tp` divides it (hetplan's
    runtime, `planner/runtime/stage.py: apply_vocab_tp`); other layers when the graph gives
    them TP all-reduces."""
    if layer.kind in ("head", "embedding"):
        if not fw.vocab_parallel:
            return False
        return fw.pads_vocab or tp == 1 or (layer.vocab_size > 0
                                            and layer.vocab_size % tp == 0)
    return layer.kind == "block" or layer.tp_allreduces_fwd > 0


def params_per_gpu(layer: Layer, ts: int, ep: int = 1) -> float:
    """The layer's parameters on one GPU when split `ts` ways by TP (1: not split): expert
    parallelism splits the routed experts over ep GPUs (each still TP-split); a vocab split
    leaves GPT's position table and the final norm whole (vocab_cost.py)."""
    kept = whole_params(layer) if ts > 1 and layer.kind in ("embedding", "head") else 0.0
    return kept + (layer.params - kept - layer.expert_params * (1 - 1 / ep)) / ts


def layer_costs(layer: Layer, graph: LayerGraph, gpu: GpuSpec, tp: int, mb: int,
                recompute: str, precision: str, sp: bool, link: Link,
                profiles: ProfileSet, fw: Framework = DEFAULT_FRAMEWORK,
                moe: tuple[int, Link | None, float] = (1, None, DEFAULT_CAPACITY_FACTOR),
                context: tuple[int, Link | None] = (1, None),
                ) -> tuple[float, ...]:
    """(fwd, bwd, bwd_weight, params/GPU, activation bytes/GPU, update, transient, recompute,
    routed-expert params/GPU, gathered K/V activation bytes, gathered K/V transient) of one
    layer; `bwd` includes the recompute time; the last two are parts of the activation and
    transient bytes. `moe` is (expert-parallel degree, the all-to-all's link, capacity factor)
    for a mixture-of-experts layer; `context` is (context-parallel degree, its ring's link)."""
    cp, cp_link = context
    if layer.kind in ("embedding", "head"):
        # Only the layers between them are ever recomputed: the runtime checkpoints chain
        # elements 0 < e < last (runtime/engine.py, stage.apply_recompute); Megatron,
        # DeepSpeed's PipelineModule (`_is_checkpointable`) and torchtitan their transformer
        # layers: the head and its loss always keep everything.
        recompute = "none"
    # Context parallelism gives each GPU seq/cp of every sequence: 2 of 2·cp zig-zag chunks,
    # so even the causal attention core divides evenly (Megatron-Core context parallelism;
    # Liu et al., "Ring Attention", 2023). Every per-GPU figure below is linear in the
    # sequences per micro-batch (attention too: seq/cp queries against all seq keys is 1/cp
    # of the s² work), so the layer is priced as mb/cp sequences, plus the K/V ring.
    b, t = mb / cp, tp
    split = tp_split(layer, fw, t)
    ts = t if split else 1
    ep, ep_link, capacity = moe
    params = params_per_gpu(layer, ts, ep)
    # The busiest GPU's extra routed tokens beyond the balanced load (cost_models/moe.py; none
    # at ep 1, moe_a2a.py): its GEMMs forward, and dgrad + wgrad backward.
    load = routed_load_factor(ep, capacity, layer.num_experts)
    extra = (load - 1.0) * layer.fwd_expert_flops if layer.num_experts else 0.0
    mm_frac = layer.fwd_matmul_flops / layer.fwd_flops if layer.fwd_flops > 0 else 0.0
    mem_share = (1 / t if sp else 0.5 + 0.5 / t) if split else 1.0
    if split and layer.kind in ("embedding", "head"):
        # Only vocabulary-sized traffic divides (vocab_cost.py), SP or not.
        mem_share = vocab_memory_share(layer, graph, fw, t, sp)
    if layer.kind == "block":  # fused kernels move less than the eager graph (framework.py)
        mem_share *= fw.memory_traffic_scale
        if fw.fused_kernels:
            mem_share *= _fused_ratio(layer, graph)
    # A causal flash kernel skips part of the attention core (framework.py); its backward is
    # twice its forward and all activation gradient.
    width = layer.matmul_dim / t if layer.kind in ("block", "other") else layer.matmul_dim
    gathered = cp > 1 and layer.kind == "block" and not fw.cp_ring_overlap
    # Under cp each rank's two zig-zag query chunks attend causally to the keys before their
    # ends (runtime/context.py, no mask): the causal share of seq/cp queries × seq keys,
    # the same on every rank, as in the ring.
    share = fw.attention_flops_share
    # The attention core at its kernel's own published rate (cost_models/attention.py).
    attn_scale = attention_scale_on(fw.attention_kernel, gpu, precision)
    skipped = (1.0 - share) * layer.fwd_attention_flops
    score_fwd, score_bwd = _score_traffic_bytes(layer, graph, fw)
    work = LayerWork(
        fwd_matmul_flops=b * (layer.fwd_matmul_flops - skipped + extra) / ts,
        bwd_act_matmul_flops=b * (layer.bwd_act_flops * mm_frac - 2 * skipped + extra) / ts,
        bwd_weight_matmul_flops=b * (layer.bwd_weight_flops * mm_frac + extra) / ts,
        fwd_memory_bytes=b * (layer.fwd_memory_bytes * mem_share + score_fwd / ts),
        bwd_memory_bytes=b * (2 * layer.fwd_memory_bytes * mem_share + score_bwd / ts),
        gemm_width=max(width, 1.0),
        gemm_scale=layer_gemm_factors(
            layer, graph.seq_len, gpu, precision, ts, b, share, fw.eager_attention_gemms,
            attention_scale=attn_scale if precision != "fp8" else (1.0, 1.0),
            ep=ep if layer.num_experts else 1),  # one cache entry per dense shape
        kernels_fwd=_KERNELS.get(layer.kind, KERNELS_PER_BLOCK_FWD),
    )
    fwd, bwd_act, bwd_w = layer_compute_s(work, gpu, precision, fw.host_dispatch_overlapped)
    if precision == "fp8" and layer.fwd_attention_flops > 0:
        # fp8 recipes run only the linear layers in fp8 (Transformer Engine fp8_autocast and
        # torchao Float8Linear); the attention core (flash / fused attention) stays bf16.
        attn = b * share * layer.fwd_attention_flops / ts
        bf16_s = gemm_s(attn, gpu, "bf16", work.gemm_width)
        fp8_s = gemm_s(attn, gpu, precision, work.gemm_width)
        fwd += bf16_s * attn_scale[0] - fp8_s
        bwd_act += 2 * (bf16_s * attn_scale[1] - fp8_s)
    comm_fwd = comm_bwd = 0.0
    if split and layer.kind in ("embedding", "head"):
        # Each pass prices the collectives it runs (vocab_cost.py): without SP the
        # embedding's all-reduce in the forward, the head's in the backward; under
        # Megatron's or torchtitan's SP the reduce-scatters and all-gathers of each pass.
        comm_fwd, comm_bwd = vocab_tp_comm_s(layer, graph, b, t, link, fw, sp)
    elif split:
        comm_fwd = comm_bwd = layer.tp_allreduces_fwd * allreduce_s(
            b * layer.tp_allreduce_bytes, t, link)
    if split and layer.num_experts and fw.moe_tp_allreduce_per_expert:
        # hetplan's runtime all-reduces each expert's rows and each column-parallel input
        # gradient on its own, and under SP all-reduces the expert branch's output where
        # Megatron-SP reduce-scatters (moe_tp_comm.py): priced message by message.
        comm_fwd, comm_bwd = hetplan_moe_tp_comm_s(layer, b, t, ep, sp, link, load)
    if ep > 1 and layer.num_experts and ep_link is not None:
        # Dispatch and combine all-to-alls, forward and (mirrored) backward, of the routed
        # token copies each TP rank sends (all of them or its 1/tp: moe_a2a.py).
        a2a_s = moe_a2a_s(layer, b, ts, ep, capacity, fw, ep_link)
        comm_fwd, comm_bwd = comm_fwd + a2a_s, comm_bwd + a2a_s
    update = adam_step_s(params, gpu)
    if fw.tp_comm_overlap:
        # Chunked collectives pipelined with the adjacent GEMMs: only what outlasts them shows.
        # Not the head's forward: Megatron's output layer is its own ColumnParallelLinear,
        # not a Transformer Engine module (no userbuffers), whose SP all-gather runs before
        # the GEMM synchronously, and the loss's all-reduces need the GEMM's logits; its
        # backward's collectives are issued async beside the dgrad / wgrad GEMMs
        # (megatron/core/tensor_parallel/layers.py).
        w, (sf, sa, _) = work.gemm_width, work.gemm_scale
        if layer.kind != "head":
            comm_fwd = max(0.0, comm_fwd - gemm_s(work.fwd_matmul_flops, gpu, precision, w,
                                                  sf))
        comm_bwd = max(0.0, comm_bwd - gemm_s(work.bwd_act_matmul_flops, gpu, precision, w,
                                              sa))
    if gathered and cp_link is not None:
        # All-gather of every rank's K/V block before attention, and in the backward the
        # all-reduce of the gathered K/V gradient (runtime/context.py): nothing overlapped.
        whole = cp * b * kv_bytes_per_sequence(layer, graph) / ts
        comm_fwd += allgather_s(whole, cp, cp_link)
        comm_bwd += allreduce_s(whole, cp, cp_link)
    elif cp > 1 and cp_link is not None and layer.kind == "block":
        ring_fwd, ring_bwd = _ring_exposed_s(layer, graph, gpu, b, ts, cp, cp_link,
                                             fw.attention_flops_share, work.gemm_width)
        comm_fwd, comm_bwd = comm_fwd + ring_fwd, comm_bwd + ring_bwd
    fwd, bwd = fwd + comm_fwd, bwd_act + bwd_w + comm_bwd
    prof, prof_tp = None, t
    if len(profiles):
        prof = profiles.lookup(gpu.name, graph.name, layer.matmul_dim, graph.seq_len,
                               layer.kind, t, precision, b)
        if prof is None and t > 1:  # measured at TP 1 only: scale to TP t with the physics
            prof_tp = 1
            prof = profiles.lookup(gpu.name, graph.name, layer.matmul_dim, graph.seq_len,
                                   layer.kind, 1, precision, b)
    if prof is not None:
        # Measured times include the TP communication of the framework they came from. Away
        # from the measured (micro-batch, TP), scale by the analytic model's ratio.
        w_share = bwd_w / bwd if bwd > 0 else 0.0
        f_scale = b_scale = 1.0
        if prof.micro_batch != b or prof_tp != t:
            ref = layer_costs(layer, graph, gpu, prof_tp, prof.micro_batch, "none", precision,
                               sp, link, _NO_PROFILES, fw)
            f_scale = fwd / ref[0] if ref[0] > 0 else b / prof.micro_batch
            b_scale = bwd / ref[1] if ref[1] > 0 else b / prof.micro_batch
        fwd, bwd = prof.fwd_ms / 1e3 * f_scale, prof.bwd_ms / 1e3 * b_scale
        bwd_w = bwd * w_share
        if prof.update_ms is not None:
            update = prof.update_ms / 1e3 * (prof_tp / t)
    # Recomputation re-runs work inside the backward pass.
    no_recompute_bwd = bwd
    # The framework's own selective policy, from this block's dimensions (sac_cost.py):
    # (GEMM share re-run, memory-bound share re-run, bytes kept); None: Megatron's.
    sac = (sac_block_costs(layer, graph, fw.sac_policy, fw.sac_every)
           if recompute == "selective" else None)
    gemm_share, mem_share = sac[:2] if sac else (fw.recompute_gemm_fraction,
                                                 fw.recompute_memory_fraction)
    if recompute == "full":
        bwd += fwd
    elif recompute == "selective" and layer.kind == "block" and gemm_share is not None:
        # The framework's own selective policy: shares of the forward's GEMM and memory-bound
        # work (with their launches) re-run in the backward.
        mem_fwd = (memory_s(work.fwd_memory_bytes, gpu)
                   + work.kernels_fwd * constants_for(gpu.name, gpu.generation).kernel_s)
        bwd += (gemm_share * gemm_s(work.fwd_matmul_flops, gpu, precision,
                                    work.gemm_width, work.gemm_scale[0])
                + (mem_share or 0.0) * mem_fwd)
    elif recompute == "selective" and layer.kind == "block":
        attn_flops = getattr(layer, "fwd_attention_flops", None)
        if attn_flops is None:  # graphs without the field: QK^T and AV, 2·s²·h FLOPs each
            attn_flops = min(4.0 * graph.seq_len * graph.seq_len * layer.matmul_dim,
                             layer.fwd_matmul_flops)
        dropped = layer.activation_bytes - layer.activation_bytes_selective
        attn_flops *= fw.attention_flops_share
        bwd += gemm_s(b * attn_flops / t, gpu, precision, max(layer.matmul_dim / t, 1.0))
        bwd += memory_s(b * dropped / t, gpu)
    rep_per_seq = 10.0 * graph.seq_len * layer.matmul_dim * graph.dtype_bytes / 2
    saved = layer.saved_bytes(recompute)  # type: ignore[arg-type]
    whole = layer.activation_bytes
    # The norms' inputs at the residual stream's width where it is wider than the graph's
    # dtype (hetplan's autocast with fp32 weights, framework.py): each keeps s·h more bytes
    # per extra byte; under full recompute only the block's input (the stream) is kept.
    stream_whole, stream_saved = _residual_stream_extra_bytes(layer, graph, fw, recompute)
    saved, whole = saved + stream_saved, whole + stream_whole
    rep_per_seq += stream_saved
    te = _te_saved(layer, graph, precision) if fw.fused_kernels else None
    if te is not None:
        # Transformer Engine's fused modules keep less than eager autograd, fp8 casts of the
        # GEMM inputs under fp8 (cost_models/te_activations.py); selective recompute of the
        # attention core frees nothing a flash kernel keeps.
        whole, te_rep = te
        if recompute != "full":
            saved, rep_per_seq = whole, te_rep
    elif sac is not None:
        # The framework's own selective policy (torchtitan's per-op checkpointing keeps a few
        # GEMM outputs and recomputes the rest, cost_models/sac_activations.py); what it
        # keeps cannot be replicated beyond what it keeps.
        saved = sac[2]
        rep_per_seq = min(rep_per_seq, saved)
    if recompute == "full" or layer.kind != "block":
        rep_per_seq = saved if layer.kind == "block" else 0.0
    # What the embedding keeps is its token ids (their out-of-range mask too when split,
    # runtime/vocab_embed.py, as in Megatron's VocabParallelEmbedding), whole on every TP
    # rank with or without SP: a vocab split divides its gradient, not its activations.
    split_act = split and layer.kind != "embedding"
    act = activation_bytes_per_gpu(b * saved, b * rep_per_seq, t, sp) if split_act else b * saved
    if split and layer.kind == "head":
        # The loss's log-probabilities split with the vocabulary; the final norm's input and
        # the LM head's input as the framework runs them under SP (vocab_cost.py).
        vocab_part = head_split_bytes(layer, graph, saved)
        hidden = head_hidden_saved_bytes(layer, graph, fw, saved - vocab_part, t, sp)
        act = b * hidden + b * vocab_part / t
    # Eager attention's s×s probabilities (framework.py), split with the heads: kept per
    # micro-batch without recompute; with it, one block's worth while it is recomputed.
    probs = b * _attention_probs_bytes(layer, graph, fw) / ts
    transient = 0.0
    if recompute != "none":
        transient = activation_bytes_per_gpu(b * max(0.0, whole - saved), 0.0, t, sp) + probs
    else:
        act += probs
    if layer.kind == "head":  # never recomputed: its only transient is its loss's buffers
        transient = b * loss_transient_bytes(layer, graph, fw, ts)
    experts = layer.expert_params / ep / ts if layer.num_experts else 0.0
    ctx_act = ctx_transient = 0.0
    if gathered:  # every rank holds the whole sequences' K/V for attention (runtime/context.py)
        ctx_act, ctx_transient = gathered_kv_memory_bytes(
            mb * kv_bytes_per_sequence(layer, graph) / ts, cp, recompute)
        act += ctx_act
        transient += ctx_transient
    return (fwd, bwd, bwd_w, params, act, update, transient, bwd - no_recompute_bwd, experts,
            ctx_act, ctx_transient)


_NORMS = {"block": 2, "head": 1}
"""Norms whose input is the residual stream: a pre-norm block's attention and MLP norms, the
head's final norm (Llama's RMSNorm, GPT's LayerNorm; planner/models)."""


def _residual_stream_extra_bytes(layer: Layer, graph: LayerGraph, fw: Framework,
                                 recompute: str) -> tuple[float, float]:
    """(without recompute, at `recompute`) bytes per sequence the norms' saved inputs take
    beyond the graph's count when the residual stream is `fw.residual_stream_bytes` wide and
    the graph's activations `graph.dtype_bytes`: s·h per extra byte and norm; a fully
    recomputed block keeps only its input, one s·h of the stream."""
    extra = fw.residual_stream_bytes - graph.dtype_bytes
    norms = _NORMS.get(layer.kind, 0)
    if extra <= 0 or not norms:
        return 0.0, 0.0
    one = float(graph.seq_len) * layer.matmul_dim * extra
    return norms * one, (one if recompute == "full" and layer.kind == "block" else norms * one)


def _ring_exposed_s(layer: Layer, graph: LayerGraph, gpu: GpuSpec, b: float, ts: int, cp: int,
                    link: Link, share: float, width: float) -> tuple[float, float]:
    """(forward, backward) seconds of a block's K/V ring that its attention core does not hide.

    `b` is the sequences' share on this GPU (mb / cp): its K and V are b·seq·kv_heads·head_dim
    elements each per TP rank's 1/ts of the KV heads; the attention core of those queries
    against all keys is the block's attention FLOPs at the same share (causal part only)."""
    kv_bytes = b * kv_bytes_per_sequence(layer, graph) / ts
    attn_s = gemm_s(b * share * layer.fwd_attention_flops / ts, gpu, "bf16", width)
    return ring_attention_exposed_s(kv_bytes, attn_s, cp, link)


def kv_bytes_per_sequence(layer: Layer, graph: LayerGraph) -> float:
    """K and V of one block for one whole sequence: 2 · seq · kv_heads · head_dim · dtype
    bytes (tp_dims = heads, KV heads, FFN width; head_dim = hidden / heads)."""
    if len(layer.tp_dims) < 2 or layer.tp_dims[0] <= 0:
        return 0.0
    heads, kv_heads = layer.tp_dims[:2]
    return 2.0 * graph.seq_len * kv_heads * (layer.matmul_dim // heads) * graph.dtype_bytes


def _fused_ratio(layer: Layer, graph: LayerGraph) -> float:
    """Fused over eager memory-bound traffic of a block (`cost_models.fusion`), from the block's
    dimensions: hidden = `matmul_dim`, (heads, KV heads, FFN) = `tp_dims`; a gated MLP
    (SwiGLU: three FFN matrices, which Llama-style models pair with rotary embeddings) when
    the parameters hold more than the attention and two FFN matrices."""
    if len(layer.tp_dims) < 3 or graph.seq_len <= 0:
        return 1.0
    h = layer.matmul_dim
    heads, kv_heads, ffn = layer.tp_dims[:3]
    kv = h // max(heads, 1) * kv_heads
    attn = h * (h + 2 * kv) + h * h
    gated = layer.params - attn > 2.5 * h * ffn
    return fused_traffic_ratio(layer.fwd_memory_bytes / graph.seq_len, h, ffn, kv, gated=gated,
                               rotary=gated, dtype_bytes=graph.dtype_bytes)


def _te_saved(layer: Layer, graph: LayerGraph, precision: str) -> tuple[float, float] | None:
    """(saved, replicated without SP) bytes per sequence of a block under Megatron-Core with
    Transformer Engine (`cost_models.te_activations`), from the block's dimensions as in
    `_fused_ratio`; None for other layers, blocks without them and routed-expert blocks (their
    top-k FFN copies are not in that count: the graph's bytes stay)."""
    if (layer.kind != "block" or len(layer.tp_dims) < 3 or graph.seq_len <= 0
            or layer.num_experts):
        return None
    h = layer.matmul_dim
    heads, kv_heads, ffn = layer.tp_dims[:3]
    kv = h // max(heads, 1) * kv_heads
    gated = layer.params - (h * (h + 2 * kv) + h * h) > 2.5 * h * ffn
    d = graph.dtype_bytes
    f = 1 if precision == "fp8" else d
    return (te_block_saved_bytes(graph.seq_len, h, ffn, kv, heads, gated=gated, dtype_bytes=d,
                                 gemm_input_bytes=f),
            te_block_replicated_bytes(graph.seq_len, h, dtype_bytes=d, gemm_input_bytes=f))


def _attention_probs_bytes(layer: Layer, graph: LayerGraph, fw: Framework) -> float:
    """Bytes per sequence an eager attention keeps beyond what the graph (flash) records: the
    probabilities (a·s² elements at the activation dtype), with dropout also its 1-byte mask
    and the dropped copy (Korthikanti et al. 2023, Table 2: 5·a·s² in 16-bit)."""
    if not fw.keeps_attention_probs or layer.kind != "block" or not layer.tp_dims:
        return 0.0
    per_element = graph.dtype_bytes * (2 if fw.attention_dropout else 1)
    per_element += 1 if fw.attention_dropout else 0
    return layer.tp_dims[0] * graph.seq_len ** 2 * per_element


def _score_traffic_bytes(layer: Layer, graph: LayerGraph, fw: Framework) -> tuple[float, float]:
    """(forward, backward) HBM bytes per sequence that an eager attention's elementwise kernels
    move over the s×s scores (`Framework.score_passes`), beyond the graph's flash traffic."""
    if (not fw.keeps_attention_probs or not any(fw.score_passes) or layer.kind != "block"
            or not layer.tp_dims):
        return 0.0, 0.0
    elements = layer.tp_dims[0] * graph.seq_len ** 2
    mask = 1.0 if fw.attention_dropout else 0.0
    fwd_passes, bwd_passes = fw.score_passes
    return (elements * (fwd_passes * graph.dtype_bytes + mask),
            elements * (bwd_passes * graph.dtype_bytes + mask))


_NO_PROFILES = ProfileSet()
