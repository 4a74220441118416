"""What a framework's own selective activation checkpointing policy (`Framework.sac_policy`)
re-runs and keeps for one block, from that block's own dimensions.

Priced per layer, so `estimate`, the search's tables and `hetplan validate` price a policy
the same way for every model (hidden = `matmul_dim`, (heads, KV heads, FFN width) =
`tp_dims`, as `layer_cost._fused_ratio` reads them):

- "torchtitan-op" (torchtitan's default `selective_ac_option = 'op'`): re-runs wk, wo and w3
  (every second `aten.mm` of its Llama block) and every memory-bound op; keeps the block
  input, Q, V, the flash output and its fp32 log-sum-exp, w1's and w2's outputs
  (`cost_models.sac_activations.op_sac_saved_bytes`). Only a dense SwiGLU (Llama-style)
  block issues those seven mms in that order: routed-expert blocks, blocks without their
  dimensions and non-gated MLPs (GPT) keep the graph's Megatron-style selective pricing.
- "torchtitan-layer" (`selective_ac_option = "N"`, N = `Framework.sac_every`): every N-th
  block fully checkpointed, the others whole. Per layer that is its average, 1/N of a
  forward re-run and the 1/N-weighted mean of the two saved counts, any block (what the
  search's per-layer tables use); `stage_cost` prices a stage's own blocks exactly, which
  ones the counter checkpoints (`planner.costing.layer_ac`).
"""

from __future__ import annotations

from cost_models.sac_activations import layer_sac_saved_bytes, op_sac_saved_bytes
from planner.costing.framework import SAC_POLICIES
from planner.graph.layers import Layer, LayerGraph

__all__ = ["sac_block_costs"]


def _llama_dims(layer: Layer) -> tuple[int, int, int, int] | None:
    """(hidden, heads, KV width, FFN width) of a dense SwiGLU block, else None. Gated: the
    parameters hold more than the attention and two FFN matrices (`_fused_ratio`'s test)."""
    if (layer.kind != "block" or layer.num_experts or len(layer.tp_dims) < 3
            or layer.tp_dims[0] <= 0 or layer.matmul_dim <= 0):
        return None
    h = layer.matmul_dim
    heads, kv_heads, ffn = layer.tp_dims[:3]
    kv = h // heads * kv_heads
    if layer.params - (h * (h + 2 * kv) + h * h) <= 2.5 * h * ffn:
        return None
    return h, heads, kv, ffn


def sac_block_costs(layer: Layer, graph: LayerGraph, policy: str, every: int = 2
                    ) -> tuple[float, float, float] | None:
    """(share of the forward's GEMM FLOPs re-run, share of its memory-bound work re-run, bytes
    kept per sequence) of `layer` under `policy` with `selective` recompute (`every`: the
    block interval of "torchtitan-layer"); None where the policy does not describe the layer
    (the caller keeps Megatron's selective pricing)."""
    if not policy or layer.kind != "block":
        return None
    if policy == "torchtitan-layer":
        return 1 / every, 1 / every, layer_sac_saved_bytes(
            layer.activation_bytes_full, layer.activation_bytes, every)
    if policy != "torchtitan-op":
        raise ValueError(f"sac_policy must be one of {SAC_POLICIES}, got {policy!r}")
    dims = _llama_dims(layer)
    if dims is None or graph.seq_len <= 0 or layer.fwd_matmul_flops <= 0:
        return None
    h, heads, kv, ffn = dims
    rerun = 2.0 * (h * kv + h * h + h * ffn) * graph.seq_len  # wk, wo, w3 forward FLOPs
    kept = op_sac_saved_bytes(graph.seq_len, h, ffn, kv, heads, dtype_bytes=graph.dtype_bytes)
    # What the policy keeps cannot exceed what the whole block keeps without checkpointing.
    return (min(1.0, rerun / layer.fwd_matmul_flops), 1.0,
            min(kept, layer.activation_bytes))
