"""A transformer block as a graph Layer built from its dimensions alone (GEMM-shape and
attention-kernel tests): its FLOPs follow the closed forms, its byte fields are placeholders."""

from __future__ import annotations

from planner.graph.layers import Layer


def block_layer(h: int, heads: int, kv: int, ffn: int, seq: int, linear: int,
                name: str) -> Layer:
    """A block of `linear` weight elements in its GEMMs, `heads` query and `kv` key/value heads,
    attention over `seq` tokens (4·s²·h FLOPs forward, twice backward)."""
    attention = 4.0 * seq * seq * h
    fwd = 2.0 * seq * linear + attention
    return Layer(index=1, name=name, kind="block", params=linear + 2 * h, fwd_flops=fwd,
                 bwd_act_flops=fwd + attention, bwd_weight_flops=2.0 * seq * linear,
                 fwd_matmul_flops=fwd, fwd_attention_flops=attention, fwd_memory_bytes=1e6,
                 activation_bytes=1e6, activation_bytes_selective=1e6, activation_bytes_full=1e6,
                 output_bytes=1e6, tp_allreduce_bytes=1e6, tp_allreduces_fwd=2, max_tp=8,
                 matmul_dim=h, tp_dims=(heads, kv, ffn))
