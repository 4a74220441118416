"""Activations a block keeps under torchtitan's selective activation checkpointing.

torchtitan (`torchtitan/models/llama/parallelize_llama.py`, `_apply_ac_to_transformer_block`,
the 2024-12 commit 9dec370 its H100 benchmark tables name, and later versions) wraps each
transformer block in a non-reentrant `checkpoint_wrapper` whose policy
(`create_selective_checkpoint_contexts`) marks MUST_SAVE the outputs of the ops in its
`_save_list` (`aten.mm`, SDPA's flash and memory-efficient kernels, `reduce_scatter_tensor`,
and `abs` / `max` for float8 scales) "except every second mm", counted per block call; every
other op is recomputed in the backward. Its Llama block issues seven `aten.mm` in this order:
wq, wk, wv, (SDPA), wo, w1, w3, w2, so the odd ones are kept:

- the block's input, which the checkpoint holds to re-run the block (activation dtype, h);
- wq's output Q (h) and wv's output V (kv width under GQA);
- the flash kernel's output (h) and its fp32 log-sum-exp per head and token;
- w1's output (ffn) and w2's output (h).

Nothing else of the block outlives its forward: the norms, RoPE, K, the repeated K/V, wo's
and w3's outputs and the SwiGLU product are rebuilt from those when the backward reaches the
block. In s·h units (activation dtype) that is 4 + kv/h + ffn/h, 7.75 for Llama 3 8B, against
the ~20.5 a flash-attention eager block keeps without checkpointing (planner/graph/measure.py).

`selective_ac_option = <n>` (torchtitan's "selective layer") checkpoints every n-th block fully
(its input only) and leaves the others whole: on average (full + (n - 1) × none) / n.

Not modelled: with tensor parallelism w2's output is a partial sum before its reduce-scatter
(whole, not split) and the reduce-scatter's output is kept too; with float8 the linears run
`_scaled_mm`, not `aten.mm`, so none of their outputs are kept (torchtitan's fp8 rows run
under torch.compile, whose partitioner applies the policy to the fused graph instead).
"""

from __future__ import annotations

__all__ = ["LSE_BYTES", "op_sac_saved_bytes", "layer_sac_saved_bytes"]

LSE_BYTES = 4
"""Flash attention's softmax statistics: one fp32 log-sum-exp per head and query token."""


def op_sac_saved_bytes(seq: int, hidden: int, ffn: int, kv_dim: int, heads: int, *,
                       dtype_bytes: int = 2) -> float:
    """Bytes a Llama block (q/k/v/o projections, flash SDPA, SwiGLU w1/w3/w2) keeps for its
    backward per sequence of `seq` tokens under torchtitan's `op` policy, whole (no TP)."""
    kept = (hidden          # the block's input, held by the checkpoint
            + hidden        # wq output (mm 1)
            + kv_dim        # wv output (mm 3)
            + hidden        # flash attention output
            + ffn           # w1 output (mm 5)
            + hidden)       # w2 output (mm 7)
    return float(seq * kept * dtype_bytes + seq * heads * LSE_BYTES)


def layer_sac_saved_bytes(full_bytes: float, none_bytes: float, every: int = 2) -> float:
    """Average bytes a block keeps per sequence when every `every`-th block is fully
    checkpointed (keeping `full_bytes`) and the rest keep all they save (`none_bytes`)."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return (full_bytes + (every - 1) * none_bytes) / every
