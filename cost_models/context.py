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

__all__ = ["ring_attention_bytes", "ring_attention_exposed_s"]


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
