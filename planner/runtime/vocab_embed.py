"""Megatron's vocab-parallel embedding, so the token table's gradient is born split.

The token table is a DTensor split over the TP ranks by vocabulary rows (Shard(0)). DTensor's
own embedding op (torch's RowwiseParallel) looks it up right, but torch 2.13 has no sharding
rule that makes the embedding backward's weight gradient Shard(0) from a replicated output
gradient (`_embedding_ops.embedding_dense_backward_strategy` offers Shard(1) or Partial), so
it computes the gradient whole, vocab × hidden, on every TP rank, and AccumulateGrad holds
that until the gradient sync cuts it back to the rank's rows. `estimate` prices the rows
alone, and a 128k-vocabulary, 8,192-wide table at TP 8 is ~1.75 GiB of bf16 more per rank.

Here each rank looks up only its rows (Megatron's VocabParallelEmbedding,
megatron/core/tensor_parallel/layers.py): ids outside [first, first + rows) look up row 0
and are zeroed, and the partial outputs are all-reduced. The lookup runs on the weight's
local tensor, so its backward allocates a rows × hidden gradient, and `to_local`'s backward
hands it to AccumulateGrad as a Shard(0) DTensor like the weight: nothing vocab-sized is ever
allocated. The output gradient is the same on every TP rank (the next block's column-parallel
input, or sequence parallelism's gather, makes it so), so the all-reduce's backward is the
identity, as in Megatron. The table keeps its DTensor weight, so checkpoints, ZeRO slices,
FSDP2 (which hands the forward an unsharded TP DTensor) and tied heads see what they saw.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

__all__ = ["split_embedding", "vocab_parallel_lookup"]


def split_embedding(m: nn.Embedding, mesh: Any) -> bool:
    """Make `m` vocab-parallel over the 1-D TP `mesh` in place (its weight a Shard(0) DTensor,
    its forward `vocab_parallel_lookup`); False, untouched, for a table whose lookup reads
    rows it does not own: `max_norm` renormalises the rows it looks up (the masked ids' row 0
    too), `scale_grad_by_freq` counts every id, and a sparse gradient has no DTensor rule."""
    if m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
        return False
    if m.num_embeddings % mesh.size():
        return False
    w = m.weight
    # Every TP rank built the same weights, so each keeps its rows without a scatter.
    split = distribute_tensor(w.detach(), mesh, [Shard(0)], src_data_rank=None)
    m.weight = nn.Parameter(split, requires_grad=w.requires_grad)
    m.forward = functools.partial(vocab_parallel_lookup, m)  # type: ignore[method-assign]
    return True


def vocab_parallel_lookup(m: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    """`m(ids)` whole on every TP rank, from this rank's rows of `m.weight` (read at call time:
    FSDP2 swaps the parameter between its sharded and gathered forms)."""
    w = m.weight
    if not isinstance(w, DTensor) or tuple(w.placements) != (Shard(0),):
        raise RuntimeError(f"vocab-parallel embedding expects a Shard(0) DTensor weight, "
                           f"got {type(w).__name__} {getattr(w, 'placements', '')}")
    mesh = w.device_mesh
    local = w.to_local()
    rows = local.shape[0]
    first = mesh.get_local_rank() * rows  # split_embedding asked for an even split
    shifted = ids - first
    outside = (shifted < 0) | (shifted >= rows)
    pad = m.padding_idx
    pad = pad - first if pad is not None and first <= pad < first + rows else None
    out = F.embedding(shifted.masked_fill(outside, 0), local, pad)
    out = out.masked_fill(outside.unsqueeze(-1), 0.0)
    # Partial → Replicate is the all-reduce; its backward keeps the (replicated) gradient.
    whole = DTensor.from_local(out, mesh, [Partial()], run_check=False)
    return whole.redistribute(mesh, [Replicate()]).to_local()
