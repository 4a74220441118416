"""Context parallelism: the K/V exchange of attention when each sequence is split over cp GPUs.

Each of the cp GPUs holds seq/cp tokens of every sequence: 2 of 2·cp chunks in zig-zag order
(chunks i and 2·cp-1-i), so that causal attention work is the same on every GPU
(Megatron-Core context parallelism, docs "context_parallel"; the same split in Llama 3's
all-gather variant, Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.2).

Ring attention (Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for
Near-Infinite Context", 2023; Megatron's `cp_comm_type="p2p"`): in cp steps each GPU
attends its queries to one K/V block while it passes that block to the next GPU of the
ring; cp-1 blocks travel, each overlapped with the attention of the step, so a step costs
the longer of the two. The backward sends K, V and the partial dK, dV: twice the bytes, and
its attention core is twice the forward's work (two GEMMs per forward one).
"""

from __future__ import annotations

from cost_models.comm import Link, p2p_s

__all__ = ["gathered_kv_memory_bytes", "ring_attention_bytes", "ring_attention_exposed_s"]


def ring_attention_bytes(kv_bytes: float, cp: int) -> tuple[float, float]:
    """(forward, backward) bytes one GPU sends per layer: cp-1 K/V blocks of `kv_bytes` each
    (K and V of its seq/cp tokens), and in the backward those plus dK, dV."""
    if cp <= 1:
        return 0.0, 0.0
    return (cp - 1) * kv_bytes, 2 * (cp - 1) * kv_bytes


def ring_attention_exposed_s(kv_bytes: float, attention_s: float, cp: int,
                             link: Link) -> tuple[float, float]:
    """(forward, backward) seconds per layer the ring adds to the attention core.

    `kv_bytes`: the K/V block one GPU holds (its seq/cp tokens); `attention_s`: its forward
    attention core (its queries against the whole sequence's keys). Step i computes on the
    block in hand while sending it on: each of the cp-1 sends shows only where it outlasts
    the step's attention, attention_s / cp (balanced by the zig-zag split)."""
    if cp <= 1 or kv_bytes <= 0:
        return 0.0, 0.0
    step_s = attention_s / cp
    fwd = (cp - 1) * max(0.0, p2p_s(kv_bytes, link) - step_s)
    bwd = (cp - 1) * max(0.0, p2p_s(2 * kv_bytes, link) - 2 * step_s)
    return fwd, bwd


def gathered_kv_memory_bytes(kv_whole_bytes: float, cp: int,
                             recompute: str) -> tuple[float, float]:
    """(saved per micro-batch, transient) bytes one GPU holds for one block beyond its own
    seq/cp tokens' K/V when attention all-gathers K and V over the cp group (the Llama 3
    variant: Dubey et al. 2024, §3.3.2; hetplan's runtime, `planner/runtime/context.py`).

    `kv_whole_bytes`: K and V of the whole sequences of a micro-batch on this GPU's KV heads
    (2 · seq · kv_heads / tp · head_dim · dtype bytes · micro-batch). Each query chunk attends
    causally to the gathered keys before its end (`planner/models/prefix_attention.py`): no
    position mask is built.

    Attention saves the gathered K/V for its backward (selective recompute checkpoints the
    core, whose inputs they are), so without full recompute each in-flight micro-batch keeps
    (cp-1)/cp of `kv_whole_bytes` per block beyond its own share. In the block's backward the
    gathered K and V get their whole gradients, and the gather's backward copies one of them
    to all-reduce it: 1.5 × `kv_whole_bytes` at once (the attention's own backward works one
    key block of seq/(2·cp) at a time beside the whole gradients: at most 1/(2·cp) of it,
    below that 0.5). Under full recompute the block re-gathers K/V inside the backward: the
    (cp-1)/cp joins the transient instead."""
    if cp <= 1 or kv_whole_bytes <= 0:
        return 0.0, 0.0
    remote = kv_whole_bytes * (cp - 1) / cp
    transient = 1.5 * kv_whole_bytes
    if recompute == "full":
        return 0.0, transient + remote
    return remote, transient
