"""Activations a Megatron-Core block with Transformer Engine keeps for its backward.

The LayerGraph records what eager PyTorch autograd saves (planner/graph/extract.py): for a
Llama block ~52 s·h bytes per sequence in bf16 (RMSNorm upcast to fp32 and applied in several
saved steps, SiLU, the gate product and rotary embedding each saving their inputs). Megatron-
Core's TE layer spec saves what its fused modules need, which is Korthikanti et al.
("Reducing Activation Recomputation in Large Transformer Models", MLSys 2023, Table 2 and
§4.1) with flash attention and no dropout (NeMo's Llama 3 and GPT-3 175B configs set
`hidden_dropout` and `attention_dropout` to 0.0):

- per norm + GEMM (`TELayerNormColumnParallelLinear`, QKV and FC1): the norm input (activation
  dtype) and the normed output the GEMM's weight gradient needs (its input);
- attention (`TEDotProductAttention`, flash / cuDNN fused): Q, K, V and the output O (K, V at
  the KV width under GQA) plus the fp32 log-sum-exp per head and token, never the s×s scores;
- output projection (`TERowParallelLinear`): its input O;
- fused SwiGLU (`megatron/core/fusions/fused_bias_swiglu.py`) or bias-GeLU: its input, the
  FC1 output (2·ffn wide gated, ffn plain); FC2 (`TERowParallelLinear`): the activation output.

Korthikanti's GPT accounting (34·s·h without the 5·a·s²/h attention term, including its 2·s·h
of dropout masks) is this count with h-wide Q, K, V, a 4h GeLU MLP and the two masks added.

fp8 (Transformer Engine `fp8_autocast`): each fp8 GEMM saves the fp8 (1-byte) cast of its input
for the weight gradient, not the bf16 tensor (TE `transformer_engine/pytorch/module/linear.py`,
`_Linear.forward`: `saved_inputmat` is the fp8 `inputmat`, or its fp8 transpose `inputmat_t`,
one copy either way, unless the recipe overrides wgrad precision; `LayerNormLinear` keeps
`ln_out` the same way). The norm inputs, the attention
tensors (fp8 attention is off by default, `fp8_dot_product_attention`) and the SwiGLU input
(`activation_func_fp8_input_store` is off by default) stay in the activation dtype; O is then
kept twice, bf16 for the attention backward and its fp8 cast for the projection's.

Tensor parallelism without sequence parallelism leaves the norm inputs and normed outputs whole
on every rank (Korthikanti Table 2, the replicated 10·s·h of which these are 8·s·h here);
`te_block_replicated_bytes` is that part.
"""

from __future__ import annotations

__all__ = ["te_block_replicated_bytes", "te_block_saved_bytes"]

LSE_BYTES = 4
"""Flash attention's softmax statistics: one fp32 log-sum-exp per head and query token."""


def te_block_saved_bytes(seq: int, hidden: int, ffn: int, kv_dim: int, heads: int, *,
                         gated: bool, dtype_bytes: int = 2, gemm_input_bytes: int = 2) -> float:
    """Bytes one block keeps for its backward per sequence of `seq` tokens, whole (before any
    TP split). `gemm_input_bytes`: 1 when the GEMMs run in fp8, else the activation dtype."""
    d, f = dtype_bytes, gemm_input_bytes
    o_copy = f if f != d else 0  # fp8: the projection keeps its own cast of O
    attention = (d * hidden + f * hidden                  # norm input, normed QKV input
                 + d * (hidden + 2 * kv_dim)              # Q, K, V for the flash backward
                 + d * hidden + o_copy * hidden)          # O (flash) and the projection input
    mlp = (d * hidden + f * hidden                        # norm input, normed FC1 input
           + d * (2 if gated else 1) * ffn                # activation input (FC1 output)
           + f * ffn)                                     # FC2 input
    return float(seq * (attention + mlp) + seq * heads * LSE_BYTES)


def te_block_replicated_bytes(seq: int, hidden: int, *, dtype_bytes: int = 2,
                              gemm_input_bytes: int = 2) -> float:
    """The part of `te_block_saved_bytes` TP without sequence parallelism keeps whole on every
    rank: both norms' inputs and normed outputs."""
    return float(2 * seq * hidden * (dtype_bytes + gemm_input_bytes))
