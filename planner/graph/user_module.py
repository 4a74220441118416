"""Extract a LayerGraph from a user's own nn.Module.

The protocol: the module's largest `nn.ModuleList` holds its blocks (chain elements
1..L, named by their module path, e.g. `transformer.h.3`); everything the forward runs
before the first block is the "embedding" element (index 0), everything after the last
block (including a loss, if the forward computes one) is the "head" (index L+1). The
forward's output, or its first tensor, is back-propagated with a gradient of ones.

Every element is measured (no reuse), on whatever device the module lives on: build a
large module on `meta` (weights are never read). Figures are divided by the example's
batch size to give per-sequence numbers. Tensor-parallel limits are inferred from the
blocks' Linear widths (`max_tp` = their gcd) and assume Megatron's two all-reduces per
block; hand-written attention gets no selective-recompute saving (only SDPA calls and
our CoreAttention are recognised as the attention core).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from planner.errors import HetplanError
from planner.graph.extract import layer_graph_from_stats
from planner.graph.layers import LayerGraph
from planner.graph.measure import Recorder, measure_regions
from planner.models import CoreAttention

__all__ = ["find_blocks", "graph_from_module"]


def find_blocks(module: nn.Module) -> tuple[str, nn.ModuleList]:
    """The largest ModuleList in `module` (the first one found among equals)."""
    best: tuple[str, nn.ModuleList] | None = None
    for name, sub in module.named_modules():
        if isinstance(sub, nn.ModuleList) and len(sub) > (len(best[1]) if best else 0):
            best = (name, sub)
    if best is None:
        raise HetplanError(f"{type(module).__name__} has no nn.ModuleList of blocks; put the "
                           "repeated blocks in an nn.ModuleList so hetplan can cut the chain")
    return best


def _first_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, dict):
        value = list(value.values())
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf
    raise HetplanError("the module's forward returned no tensor to back-propagate")


def _install(blocks: nn.ModuleList, example: tuple[Any, ...]) -> Any:
    last = len(blocks) + 1

    def install(rec: Recorder) -> list[Any]:
        rec.enter(0, example)
        handles = []
        for j, block in enumerate(blocks):
            def pre(mod: nn.Module, args: Any, j: int = j) -> None:
                if j == 0:
                    rec.leave(0, args)
                rec.enter(j + 1, args)

            def post(mod: nn.Module, args: Any, out: Any, j: int = j) -> None:
                rec.leave(j + 1, out)
                if j == len(blocks) - 1:
                    rec.enter(last, (_first_tensor(out),))

            handles.append(block.register_forward_pre_hook(pre))
            handles.append(block.register_forward_hook(post))
        return handles
    return install


def _block_tp(block: nn.Module) -> int:
    widths = [w for m in block.modules() if isinstance(m, nn.Linear)
              for w in (m.in_features, m.out_features)]
    return math.gcd(*widths) if widths else 1


def graph_from_module(module: nn.Module, example_input: Any, *, name: str) -> LayerGraph:
    """Measure `module(example_input)` element by element (see the module docstring)."""
    prefix, blocks = find_blocks(module)
    params = list(module.parameters())
    if not params:
        raise HetplanError(f"{type(module).__name__} has no parameters to plan for")
    example = example_input if isinstance(example_input, tuple) else (example_input,)
    first = _first_tensor(example)
    batch = first.shape[0] if first.dim() >= 2 else 1
    seq_len = first.shape[1] if first.dim() >= 2 else first.shape[0]
    cores = [m for m in module.modules() if isinstance(m, CoreAttention) and m.impl == "math"]
    n = len(blocks)
    stats = measure_regions(lambda: _first_tensor(module(*example)), _install(blocks, example),
                            n + 2, params, cores)
    hidden = int(stats[0].output_bytes // max(1, batch * seq_len * params[0].element_size()))
    names = ["embed", *(f"{prefix}.{j}" if prefix else str(j) for j in range(n)), "head"]
    # Embedding and head: split like Megatron's vocab-parallel layers (one all-reduce).
    ends = (hidden, (), 1, hidden)
    tp = [ends, *((_block_tp(b), (), 2, hidden) for b in blocks), ends]
    # The token table: the largest embedding (the runtime splits that one over TP).
    vocab = max((m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)),
                default=0)
    return layer_graph_from_stats(name, seq_len, params[0].element_size(), stats,
                                  list(range(n + 2)), names=names, tp=tp, per_sequence=batch,
                                  vocab_size=vocab)
