"""The GEMMs of one layer on one GPU, from the layer's dimensions, and their shape factors.

A transformer block's linear layers are QKV (hidden -> (heads + 2·KV heads)·head_dim), the
attention output (heads·head_dim -> hidden), and the MLP (hidden -> FFN, two such matrices
for a gated MLP, FFN -> hidden). Megatron TP splits the first of each pair by columns (N / t)
and the second by rows (K / t). With M the micro-batch's tokens, the forward runs
C[M, N] = X[M, K]·W[K, N]; the backward runs the activation gradient dX[M, K] = dC·Wᵀ (a GEMM
of M × K reducing over N) and the weight gradient dW[K, N] = Xᵀ·dC (K × N reducing over M).
The attention core (flash / fused attention) is not a cuBLAS GEMM: it is priced at the wide
rate × its kernel's own scale (`cost_models.attention`: forward, and backward for the
activation-gradient pass), 1.0 where no kernel figure applies.
"""

from __future__ import annotations

import math
from functools import lru_cache

from cost_models.compute import element_bytes, gemm_wide_flops_per_s
from cost_models.efficiency import constants_for
from cost_models.gemm_shape import GemmShape, shape_factor
from cost_models.gpu import GpuSpec
from planner.graph.layers import Layer

__all__ = ["layer_gemm_factors", "layer_weights"]

Weight = tuple[int, int, str]
"""(K, N, split) of one weight matrix: its input and output widths and how TP splits it,
`col` (N / t), `row` (K / t) or `none`."""


def layer_weights(layer: Layer, seq_len: int) -> tuple[Weight, ...]:
    """The weight matrices a layer multiplies every token by (the attention core excluded),
    from its dimensions; a layer without them gets one matrix with its per-token FLOPs."""
    h = layer.matmul_dim
    if h <= 0 or seq_len <= 0:
        return ()
    linear = max(0.0, (layer.fwd_matmul_flops - layer.fwd_attention_flops) / seq_len)
    if linear <= 0:
        return ()
    split = "col"
    if layer.kind == "head":
        vocab = layer.vocab_size or round(linear / (2 * h))
        return ((h, vocab, split),)
    weights: list[Weight] = []
    if layer.kind == "block" and len(layer.tp_dims) >= 3 and layer.tp_dims[0] > 0:
        heads, kv_heads, ffn = layer.tp_dims[:3]
        head_dim = h // heads
        weights = [(h, (heads + 2 * kv_heads) * head_dim, "col"), (heads * head_dim, h, "row")]
        if layer.num_experts and layer.experts_per_token:
            # Routed experts are counted apart (`layer_gemm_factors`); a shared expert or the
            # router stays in the rest below.
            linear -= layer.fwd_expert_flops / seq_len
        else:
            mlp = linear - 2.0 * sum(k * n for k, n, _ in weights)
            matrices = round(mlp / (2.0 * h * ffn)) if ffn > 0 else 0
            if matrices in (2, 3):
                weights += [(h, ffn, "col")] * (matrices - 1) + [(ffn, h, "row")]
    rest = linear - 2.0 * sum(k * n for k, n, _ in weights)
    if rest > 0.01 * linear:
        weights.append((h, max(1, round(rest / (2 * h))), split))
    return tuple(weights)


def _per_gpu(weight: Weight, ts: int) -> tuple[int, int]:
    k, n, split = weight
    if split == "col":
        return k, math.ceil(n / ts)
    if split == "row":
        return math.ceil(k / ts), n
    return k, n


def _passes(m: int, weights: tuple[tuple[int, int], ...]
            ) -> tuple[tuple[GemmShape, ...], tuple[GemmShape, ...], tuple[GemmShape, ...]]:
    """(forward, activation-gradient, weight-gradient) GEMMs of `m` tokens through `weights`."""
    return (tuple(GemmShape(m, n, k) for k, n in weights),
            tuple(GemmShape(m, k, n) for k, n in weights),
            tuple(GemmShape(k, n, m) for k, n in weights))


def layer_gemm_factors(layer: Layer, seq_len: int, gpu: GpuSpec, precision: str, ts: int,
                       micro_batch: float, attention_share: float = 1.0,
                       eager_attention: bool = False,
                       attention_scale: tuple[float, float] = (1.0, 1.0), ep: int = 1,
                       ) -> tuple[float, float, float]:
    """(forward, activation-gradient, weight-gradient) multipliers of the layer's GEMM time at
    the wide rate: its linear GEMMs priced by shape (`cost_models.gemm_shape`), the attention
    core (`attention_share` of it run) at the wide rate × `attention_scale` (forward,
    backward: its kernel's time relative to the wide rate), weighted by FLOPs. `ts`: the TP degree
    the layer is split over (1 when every rank holds it whole); `micro_batch`: sequences on
    this GPU (a fraction of one under context parallelism, which splits the tokens).
    `eager_attention`: the attention core is two cuBLAS batched GEMMs per head over the
    materialised s×s scores (`Framework.keeps_attention_probs`), priced by their shapes like
    the linear GEMMs (`_eager_attention_shapes`). `ep`: the expert-parallel degree; each of a
    GPU's E/ep routed experts runs on the rows routed to it from all ep members."""
    c = constants_for(gpu.name, gpu.generation)
    return _factors(layer, seq_len, ts, micro_batch, attention_share,
                    gemm_wide_flops_per_s(gpu, precision), gpu.hbm_gb_per_s * 1e9 * c.memory_eff,
                    element_bytes(gpu, precision), gpu.sm_count, eager_attention,
                    attention_scale, max(ep, 1))


def _eager_attention_shapes(layer: Layer, seq_len: int, ts: int, micro_batch: float
                            ) -> tuple[tuple[GemmShape, ...], tuple[GemmShape, ...]] | None:
    """(forward, activation-gradient) GEMMs of an eager attention core, per head d = h / a:
    forward S = Q·Kᵀ (s, s, d) and O = P·V (s, d, s); backward dP = dO·Vᵀ (s, s, d), dV =
    Pᵀ·dO, dQ = dS·K and dK = dSᵀ·Q (s, d, s each). The heads of the micro-batch on this GPU
    run as one batched GEMM, stacked along M (waves and tiles over all of them). Each moves
    the s×s operand through HBM, so with a small head dimension (64: 32 FLOPs per fp32 byte)
    they are memory-bound where a GPU's FLOPs per byte of bandwidth are higher."""
    if not layer.tp_dims or layer.fwd_attention_flops <= 0:
        return None
    heads = layer.tp_dims[0]
    d = max(1, round(layer.matmul_dim / heads))
    batch = max(1, round(micro_batch * heads / ts))
    s = seq_len
    return ((GemmShape(batch * s, s, d), GemmShape(batch * s, d, s)),
            (GemmShape(batch * s, s, d),) + (GemmShape(batch * s, d, s),) * 3)


@lru_cache(maxsize=16384)
def _factors(layer: Layer, seq_len: int, ts: int, micro_batch: float, attention_share: float,
             wide: float, memory: float, nbytes: float, sm_count: int | None,
             eager_attention: bool = False,
             attention_scale: tuple[float, float] = (1.0, 1.0), ep: int = 1,
             ) -> tuple[float, float, float]:
    """`layer_gemm_factors` for given rates; cached per (layer, TP, micro-batch, rates): the
    search prices the same block shape for every layer and many plans."""
    weights = layer_weights(layer, seq_len)
    tokens = max(1, round(micro_batch * seq_len))
    # (GEMMs of one representative, the FLOPs per pass they stand for on this GPU)
    groups: list[tuple[int, tuple[tuple[int, int], ...], float]] = []
    if weights:
        mats = tuple(_per_gpu(w, ts) for w in weights)
        groups.append((tokens, mats, 2.0 * tokens * sum(k * n for k, n in mats)))
    if layer.num_experts and layer.experts_per_token and layer.fwd_expert_flops > 0:
        # Each routed expert is a gated MLP over its balanced share of the token copies, of
        # the ep members' micro-batches together (runtime/experts.py: one GEMM per local
        # expert on what the all-to-all brought); one expert's GEMMs stand for all of them.
        h = layer.matmul_dim
        ffn = layer.fwd_expert_flops / seq_len / (6.0 * h * layer.experts_per_token)
        ffn_per_gpu = max(1, math.ceil(round(ffn) / ts))
        m = max(1, round(tokens * layer.experts_per_token * ep / layer.num_experts))
        groups.append((m, ((h, ffn_per_gpu), (h, ffn_per_gpu), (ffn_per_gpu, h)),
                       micro_batch * layer.fwd_expert_flops / ts))
    if not groups:
        return 1.0, 1.0, 1.0
    attention = attention_share * layer.fwd_attention_flops * micro_batch / ts
    eager = _eager_attention_shapes(layer, seq_len, ts, micro_batch) if eager_attention else None
    out = []
    # The attention core: its forward once, twice in the activation gradient, no weights; a
    # flash kernel's time is its kernel's (forward / backward scale, `cost_models.attention`),
    # an eager core's its batched GEMMs' shapes; its FLOPs count as they are.
    s_fwd, s_bwd = attention_scale
    for pass_index, att, scale in ((0, attention, s_fwd), (1, 2.0 * attention, s_bwd),
                                   (2, 0.0, 1.0)):
        timed, flops = att * scale, att
        if eager is not None and pass_index < 2 and att > 0:
            timed = att * shape_factor(eager[pass_index], wide_flops_per_s=wide,
                                       memory_bytes_per_s=memory, element_bytes=nbytes,
                                       sm_count=sm_count)
        for m, mats, group_flops in groups:
            shapes = _passes(m, mats)[pass_index]
            timed += group_flops * shape_factor(shapes, wide_flops_per_s=wide,
                                                memory_bytes_per_s=memory,
                                                element_bytes=nbytes, sm_count=sm_count)
            flops += group_flops
        out.append(timed / flops if flops > 0 else 1.0)
    return out[0], out[1], out[2]
