"""The expert-parallel all-to-alls of one mixture-of-experts block on one GPU.

Each GPU of an ep-group sends the routed token copies it holds (s·k rows of h per sequence,
`Layer.a2a_bytes`) in a dispatch all-to-all and gets the expert outputs back in a combine
all-to-all; the backward runs both mirrored. How many of a TP group's copies each TP rank
sends is the framework's (`Framework.moe_dispatch_whole_per_tp_rank`):

- hetplan's runtime (planner/runtime/experts.py): every TP rank holds the whole sequence's
  tokens (with SP the MoE branch's input is all-gathered first, seqpar.py) and dispatches all
  of them to the same TP rank of each ep peer: s·k·h per TP rank, measured on gloo in
  tests/test_moe_a2a_bytes.py;
- Megatron-Core's alltoall dispatcher (megatron/core/transformer/moe/token_dispatcher.py,
  `MoEAlltoAllTokenDispatcher`: "permute → A2A(EP) → AG(TP)", num_local_tokens = S/TP·B):
  each TP rank dispatches its own sequence slice, s·k·h/tp.

Load imbalance: the capacity factor c is the busiest expert's load over the balanced one
(cost_models/moe.py); the other E-1 experts share the rest evenly. The GPU holding the
busiest expert (with E/ep-1 others) gets `routed_load_factor` × its balanced share of routed
rows, and the ep-group waits for it: its expert GEMMs, its received all-to-all bytes and (in
hetplan's runtime) its experts' TP all-reduces are priced at that factor. It is c at ep = E
(one expert per GPU) and 1 at ep 1, where every GPU runs all experts on all its tokens
(dropless, planner/models/moe.py): imbalance moves no work between GPUs there.
"""

from __future__ import annotations

from cost_models.comm import Link, alltoall_s
from planner.costing.framework import Framework
from planner.graph.layers import Layer

__all__ = ["moe_a2a_bytes", "moe_a2a_s", "routed_load_factor"]


def routed_load_factor(ep: int, capacity: float, experts: int) -> float:
    """The busiest GPU's routed rows over its balanced share (s·k per sequence): it holds the
    busiest expert, at `capacity` × the mean, and E/ep - 1 others, each at (E - c)/(E - 1) ×
    the mean (the rest shared evenly): (c + (E/ep - 1)·(E - c)/(E - 1)) / (E/ep)."""
    per = experts // max(ep, 1)
    if ep <= 1 or per < 1 or experts < 2:
        return 1.0
    others = (experts - capacity) / (experts - 1)
    return (capacity + (per - 1) * others) / per


def moe_a2a_bytes(layer: Layer, mb: float, tp: int, ep: int, capacity: float,
                  fw: Framework) -> float:
    """Bytes one GPU puts into ONE dispatch (or combine) all-to-all of `layer` for `mb`
    sequences on a TP group of `tp` at expert-parallel degree `ep` (the buffer it holds, of
    which it keeps 1/ep: `alltoall_s`'s `nbytes`); 0 without experts or at ep 1."""
    if ep <= 1 or not layer.num_experts:
        return 0.0
    share = 1.0 if fw.moe_dispatch_whole_per_tp_rank else 1.0 / tp
    return mb * layer.a2a_bytes * routed_load_factor(ep, capacity, layer.num_experts) * share


def moe_a2a_s(layer: Layer, mb: float, tp: int, ep: int, capacity: float, fw: Framework,
              link: Link | None) -> float:
    """Seconds of one pass's all-to-alls (dispatch and combine) on `link`: forward and
    backward each run two."""
    if link is None:
        return 0.0
    return 2 * alltoall_s(moe_a2a_bytes(layer, mb, tp, ep, capacity, fw), ep, link)
