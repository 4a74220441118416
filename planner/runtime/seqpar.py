"""Sequence parallelism (Megatron-SP) for TP stages of planner.models blocks.

Inside a run of TP-sharded blocks the residual stream is split along the sequence over the
TP ranks: norms run on the local slice (SequenceParallel), the attention / MLP inputs are
all-gathered (PrepareModuleInput), the row-parallel outputs reduce-scatter back to slices.
At the run's edges the stream is sliced (entering) or all-gathered (leaving), so stage
boundaries, the embedding and the head still see full, replicated activations, whatever the
neighbouring stage's TP degree. Under context parallelism "the sequence" is this cp rank's
seq/cp tokens (its two zig-zag chunks): SP slices them over TP, and attention, whose input
is all-gathered over TP first, then all-gathers K/V over the cp group (context.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    PrepareModuleInput,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
)

from planner.errors import HetplanError
from planner.runtime.stage import shared_input_branches

__all__ = ["gather_sequence", "scatter_sequence", "sp_styles"]

_PARTS = ("attn_norm", "attn", "mlp_norm", "mlp")


def sp_styles(block: nn.Module, plan: dict[str, str]) -> dict[str, Any] | None:
    """Extra/overriding parallel styles for SP, or None when the block lacks the pre-norm
    structure (attn_norm → attn, mlp_norm → mlp) that SP needs."""
    if not all(hasattr(block, p) for p in _PARTS):
        return None
    styles: dict[str, Any] = {}
    shared = shared_input_branches(block, plan)
    for norm, branch in (("attn_norm", "attn"), ("mlp_norm", "mlp")):
        styles[norm] = SequenceParallel(use_local_output=True)
        # A branch whose column-parallel linears share the gathered DTensor (stage.py) sums
        # their Partial input gradients and reduce-scatters once backward; handed on as a
        # local tensor, each linear would all-reduce its own.
        styles[branch] = PrepareModuleInput(input_layouts=(Shard(1),),
                                            desired_input_layouts=(Replicate(),),
                                            use_local_output=branch not in shared)
    # A mixture-of-experts branch (experts, shared expert) is known by its module, not by its
    # names: its linears see flattened [tokens, hidden] rows, where dim 1 is the hidden size,
    # not the sequence, so they all-reduce and the branch's whole output is sliced back.
    from planner.models.moe import MoE  # here: planner.models imports the graph, which imports it

    moe = [b for b in ("attn", "mlp") if isinstance(getattr(block, b, None), MoE)]
    for name, style in plan.items():
        if style == "rowwise" and name.partition(".")[0] not in moe:
            styles[name] = RowwiseParallel(output_layouts=Shard(1))
    for branch in moe:
        styles[branch] = PrepareModuleInputOutput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
            use_local_input=True, output_layouts=(Replicate(),),
            desired_output_layouts=(Shard(1),), use_local_output=True)
    return styles


def _check(x: torch.Tensor, mesh: Any) -> None:
    if x.shape[1] % mesh.size():
        raise HetplanError(f"sequence_parallel: sequence length {x.shape[1]} does not divide by "
                           f"TP {mesh.size()}; turn sequence_parallel off or change the TP degree")


def scatter_sequence(x: torch.Tensor, mesh: Any) -> torch.Tensor:
    """Full (replicated) → this rank's sequence slice; backward all-gathers the gradient."""
    _check(x, mesh)
    d = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
    return d.redistribute(mesh, [Shard(1)]).to_local()


def gather_sequence(x: torch.Tensor, mesh: Any) -> torch.Tensor:
    """Sequence slices → full on every rank; backward keeps this rank's slice of the (identical)
    gradient."""
    d = DTensor.from_local(x, mesh, [Shard(1)], run_check=False)
    return d.redistribute(mesh, [Replicate()]).to_local(grad_placements=[Replicate()])
