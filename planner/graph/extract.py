"""Turn a ModelSpec (or a user's module) into a LayerGraph, measured on the meta device.

Our GPT / Llama blocks all have the same shapes, so `extract` measures a one-block model
(embedding, one block, head) and reuses the block's figures for every block; the op graph
repeats the block's ops with each copy's chain index. That is what makes llama3-405b take
well under a second. `from_module` measures every element of a user's module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import networkx as nx
import torch
from torch import nn

from planner.errors import SpecError
from planner.graph.layers import Layer, LayerGraph, LayerKind
from planner.graph.measure import Recorder, RegionStats, measure_regions
from planner.graph.spec import ModelSpec
from planner.models import ChainModel, CoreAttention, build_model, loss_fn
from planner.models.moe import MoE

__all__ = ["dtype_bytes", "extract", "layer_graph_from_stats", "measure_chain_model",
           "torch_dtype"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def torch_dtype(precision: str) -> torch.dtype:
    if precision not in _DTYPES:
        raise SpecError("precision", None, f"unknown precision {precision!r}; use one of "
                        f"{', '.join(_DTYPES)}")
    return _DTYPES[precision]


def dtype_bytes(precision: str) -> int:
    """Bytes per element at a training precision: bf16/fp16 → 2, fp32 → 4."""
    return torch_dtype(precision).itemsize


def _chain_hooks(elements: Sequence[nn.Module]) -> Any:
    def install(rec: Recorder) -> list[Any]:
        handles = []
        for i, element in enumerate(elements):
            handles.append(element.register_forward_pre_hook(
                lambda mod, args, i=i: rec.enter(i, args)))
            handles.append(element.register_forward_hook(
                lambda mod, args, out, i=i: rec.leave(i, out)))
        return handles
    return install


def measure_chain_model(model: ChainModel, seq_len: int) -> list[RegionStats]:
    """Measure each element of `model` for one sequence, the head including the loss."""
    device = next(model.parameters()).device
    tokens = torch.zeros(1, seq_len, dtype=torch.long, device=device)
    elements = model.chain()
    cores = [m for m in model.modules() if isinstance(m, CoreAttention) and m.impl == "math"]
    experts = [e for m in model.modules() if isinstance(m, MoE) for e in m.experts]
    return measure_regions(
        lambda: loss_fn(model(tokens), tokens),
        _chain_hooks(elements),
        len(elements),
        list(model.parameters()),
        cores,
        experts,
    )


def _kind(index: int, last: int) -> LayerKind:
    return "embedding" if index == 0 else "head" if index == last else "block"


def layer_graph_from_stats(
    name: str,
    seq_len: int,
    element_bytes: int,
    stats: Sequence[RegionStats],
    plan: Sequence[int],
    *,
    names: Sequence[str],
    tp: Sequence[tuple[int, tuple[int, ...], int, int]],
    per_sequence: float = 1.0,
    vocab_size: int = 0,
) -> LayerGraph:
    """Assemble a LayerGraph: chain element i takes the figures of `stats[plan[i]]`.

    `tp[i]` is (max_tp, tp_dims, all-reduces per forward, matmul_dim) of element i;
    `per_sequence` divides every figure (a user's example batch may hold several);
    `vocab_size` goes to the embedding and the head (0: unknown).
    """
    last = len(plan) - 1
    first_element: dict[int, int] = {}
    for i, region in enumerate(plan):
        first_element.setdefault(region, i)
    layers = []
    for i, region in enumerate(plan):
        st = stats[region]
        max_tp, tp_dims, n_allreduce, matmul_dim = tp[i]
        input_bytes = st.input_bytes / per_sequence
        saved = st.saved_bytes / per_sequence
        selective = (st.saved_bytes - st.core_saved_bytes + st.core_input_bytes) / per_sequence
        output = 0.0 if i == last else st.output_bytes / per_sequence
        boundary = (stats[plan[i - 1]].output_bytes if i > 0 else st.output_bytes) / per_sequence
        layers.append(Layer(
            index=i,
            name=names[i],
            kind=_kind(i, last),
            params=st.params,
            fwd_flops=st.fwd_flops / per_sequence,
            bwd_act_flops=st.bwd_act_flops / per_sequence,
            bwd_weight_flops=(st.bwd_flops - st.bwd_act_flops) / per_sequence,
            fwd_matmul_flops=st.fwd_matmul_flops / per_sequence,
            fwd_attention_flops=st.fwd_attention_flops / per_sequence,
            fwd_memory_bytes=st.fwd_memory_bytes / per_sequence,
            activation_bytes=saved,
            activation_bytes_selective=min(saved, selective),
            activation_bytes_full=min(saved, input_bytes),
            output_bytes=output,
            tp_allreduce_bytes=boundary if n_allreduce else 0.0,
            tp_allreduces_fwd=n_allreduce,
            max_tp=max_tp,
            matmul_dim=matmul_dim,
            tp_dims=tp_dims,
            tied_params=st.shared_params if st.shared_with >= 0 else 0,
            tied_to=first_element.get(st.shared_with, -1) if st.shared_params else -1,
            vocab_size=vocab_size if i in (0, last) else 0,
            gemm_params=st.gemm_params,
        ))
    return LayerGraph(name=name, seq_len=seq_len, dtype_bytes=element_bytes,
                      layers=tuple(layers), op_graph=_op_graph(stats, plan))


def _op_graph(stats: Sequence[RegionStats], plan: Sequence[int]) -> nx.DiGraph:
    """Ops of every chain element; a tensor crossing into element i comes from element i−1."""
    graph = nx.DiGraph()
    for i, region in enumerate(plan):
        for k, op in enumerate(stats[region].ops):
            node = f"{i}:{k}"
            graph.add_node(node, layer=i, op=op["op"], kind=op["kind"], flops=op["flops"],
                           bytes=op["bytes"])
            for src_region, src_k, nbytes in op["inputs"]:
                if src_region == region:
                    graph.add_edge(f"{i}:{src_k}", node, bytes=nbytes)
                elif i > 0:
                    prev = stats[plan[i - 1]].output_op
                    src = prev if prev is not None else src_k
                    graph.add_edge(f"{i - 1}:{src}", node, bytes=nbytes)
    return graph


def _spec_tp(spec: ModelSpec, index: int) -> tuple[int, tuple[int, ...], int, int]:
    h = spec.hidden_size
    if index in (0, spec.num_layers + 1):
        # Vocab-parallel embedding / LM head (vocabulary padded per TP degree, as Megatron
        # does): one all-reduce of the hidden states (fwd for the embedding, bwd for the head).
        return spec.vocab_size, (), 1, h
    dims: tuple[int, ...] = (spec.num_attention_heads, spec.num_kv_heads, spec.ffn_hidden_size)
    if spec.is_moe_block(index - 1):  # experts (and the shared expert) split like an MLP
        assert spec.moe_ffn_hidden_size is not None
        dims = (spec.num_attention_heads, spec.num_kv_heads, spec.moe_ffn_hidden_size,
                *((spec.shared_expert_ffn_hidden_size,) if spec.shared_expert_ffn_hidden_size
                  else ()))
    return math.gcd(*dims), dims, 2, h


@lru_cache(maxsize=32)
def extract(spec: ModelSpec, attn_impl: str = "sdpa", dropout: float = 0.0) -> LayerGraph:
    """The LayerGraph of `spec` at its training precision (cached; do not mutate it).

    `attn_impl="math"` (with `dropout`) measures the op-by-op attention, which keeps the s×s
    probabilities; the default measures what the runtime's fused SDPA keeps."""
    precision = spec.training.precision
    n = spec.num_layers
    dense = spec.first_dense_layers if spec.is_moe else n
    # One block of each kind: dense blocks first (DeepSeek's first_k_dense), then MoE blocks.
    kinds = [k for k in (min(dense, 1), min(n - dense, 1)) if k]
    one_of_each = spec.replace(num_layers=len(kinds), first_dense_layers=min(dense, 1)
                               if spec.is_moe else 0)
    model = build_model(one_of_each, device="meta", dtype=torch_dtype(precision),
                        attn_impl=attn_impl, dropout=dropout)  # type: ignore[arg-type]
    stats = measure_chain_model(model, spec.seq_len)
    moe_region = len(kinds)  # the last block measured is the MoE one (when there is one)
    plan = [0, *([1] * dense), *([moe_region] * (n - dense)), len(kinds) + 1]
    names = ["embed", *(f"layers.{j}" for j in range(n)), "head"]
    tp = [_spec_tp(spec, i) for i in range(n + 2)]
    graph = layer_graph_from_stats(spec.name, spec.seq_len, dtype_bytes(precision), stats, plan,
                                   names=names, tp=tp, vocab_size=spec.vocab_size)
    if not spec.is_moe:
        return graph
    moe_block = model.layers[-1].mlp
    expert_params = sum(p.numel() for p in moe_block.experts.parameters())
    a2a = spec.seq_len * spec.num_experts_per_tok * spec.hidden_size * dtype_bytes(precision)
    layers = tuple(
        replace(layer, num_experts=spec.num_experts,
                experts_per_token=spec.num_experts_per_tok, expert_params=expert_params,
                fwd_expert_flops=stats[moe_region].fwd_expert_flops, a2a_bytes=float(a2a))
        if plan[layer.index] == moe_region and layer.kind == "block" else layer
        for layer in graph.layers)
    return replace(graph, layers=layers)
