"""HBM traffic of a transformer block's memory-bound work when its elementwise chains are fused.

The LayerGraph records the memory-bound traffic of the model as eager PyTorch runs it: for a
Llama block that is ~650-1300 KB per token (RMSNorm upcast to fp32 and applied in ~8 kernels,
complex-number rotary embedding, SiLU and the gate product as separate kernels), 3.2x what the
same work costs when each chain is one kernel. Frameworks built on fused kernels (NVIDIA
Transformer Engine / Megatron-core: `LayerNormLinear` fuses the norm into the GEMM's input
cast, fused RoPE, fused SwiGLU / bias-GeLU, fused bias-dropout-add) move only each chain's
inputs and outputs once. `fused_block_bytes_per_token` counts exactly that; the estimate scales
the graph's eager traffic down to it for such frameworks (`planner.costing.Framework`).
"""

from __future__ import annotations

__all__ = ["fused_block_bytes_per_token", "fused_traffic_ratio"]


def fused_block_bytes_per_token(hidden: int, ffn: int, kv_dim: int, *, gated: bool,
                                rotary: bool, dtype_bytes: int = 2) -> float:
    """Minimal HBM bytes per token of one block's memory-bound forward work, fully fused.

    Counted in elements of the activation dtype (read + write of each fused chain):
    - 2 norms, each reads x and writes its output: 2 · 2h;
    - rotary embedding of q and k (Llama), read and write: 2 · (h + kv);
    - activation: SwiGLU reads gate and up and writes one tensor (3 · ffn), GeLU 2 · ffn;
    - 2 residual adds (bias and dropout fused in), each reads 2 and writes 1: 2 · 3h;
    - flash attention's own I/O: reads q, k, v and writes the output: 2h + 2kv.
    """
    elems = 4 * hidden + 6 * hidden + 2 * hidden + 2 * kv_dim
    if rotary:
        elems += 2 * (hidden + kv_dim)
    elems += (3 if gated else 2) * ffn
    return float(elems * dtype_bytes)


def fused_traffic_ratio(eager_bytes_per_token: float, hidden: int, ffn: int, kv_dim: int, *,
                        gated: bool, rotary: bool, dtype_bytes: int = 2) -> float:
    """Fused over eager block traffic (at most 1: fusion never adds traffic)."""
    if eager_bytes_per_token <= 0:
        return 1.0
    fused = fused_block_bytes_per_token(hidden, ffn, kv_dim, gated=gated, rotary=rotary,
                                        dtype_bytes=dtype_bytes)
    return min(1.0, fused / eager_bytes_per_token)
