"""TP collectives of a mixture-of-experts block under hetplan's own runtime.

`planner/runtime/stage.py: apply_tp` shards each linear with DTensor's Colwise/RowwiseParallel
(q, k, v, w1, w3 column-parallel; o, w2 row-parallel); attention's q, k, v share one DTensor
input (`shared_input_branches`, torchtitan's PrepareModuleInput), the MoE branch's linears do
not: it runs every expert on the rows routed to it (`planner/models/moe.py`). So, counted on
tiny-moe's MoE block with a fake TP group (`tests/test_moe_tp_collectives.py`), per pass:

- forward: each row-parallel output all-reduces on its own: attention's o (s·h), each local
  expert's w2 over its routed rows (E/ep messages, s·k·h in all), the shared expert's w2 (s·h);
- backward: attention's summed q/k/v input gradient all-reduces once (s·h); each expert
  linear all-reduces its input's gradient on its own: every local expert's w1 and w3
  (2·E/ep messages, 2·s·k·h in all), the shared expert's w1 and w3 (2 × s·h); row-parallel
  linears need nothing backward.

With sequence parallelism (`runtime/seqpar.py`) attention's input is all-gathered (its summed
q/k/v gradient reduce-scatters back to the slice) and o reduce-scatters (its backward
all-gathers); the MoE branch's input is all-gathered, its output sliced locally, and its
backward all-gathers the slice's gradient: two all-gathers and a reduce-scatter each way, on
top of the expert all-reduces above.

A dense graph's pricing (two all-reduces of s·h each way) fits neither pass.
"""

from __future__ import annotations

from cost_models.comm import Link, allgather_s, allreduce_s, reduce_scatter_s
from planner.graph.layers import Layer

__all__ = ["hetplan_moe_tp_comm_s", "hetplan_moe_tp_messages"]


def _has_shared_expert(layer: Layer) -> bool:
    # extract.py: an MoE block's tp_dims are (heads, kv heads, expert ffn[, shared ffn]).
    return len(layer.tp_dims) >= 4


def hetplan_moe_tp_messages(layer: Layer, mb: float, ep: int, sp: bool, load: float = 1.0
                            ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(forward, backward) collectives of one MoE block over its TP group for `mb` sequences,
    as (kind, bytes) with kind in all_reduce / all_gather / reduce_scatter; bytes are the
    all-reduce's buffer, the all-gather's result and the reduce-scatter's input. Each of the
    rank's E/ep experts all-reduces 1/(E/ep) of the `load` × s·k·h routed rows it gets from
    the whole ep-group (`load`: the busiest GPU's share over the balanced one, moe_a2a.py
    `routed_load_factor`)."""
    whole = mb * layer.tp_allreduce_bytes  # s·h activations at the layer boundary
    local = max(layer.num_experts // max(ep, 1), 1)
    routed = [("all_reduce", mb * load * layer.a2a_bytes / local)] * local  # s·k·h·load
    shared = 1 if _has_shared_expert(layer) else 0
    fwd = routed + [("all_reduce", whole)] * shared
    bwd = routed * 2 + [("all_reduce", whole)] * (2 * shared)
    if sp:
        fwd += [("all_gather", whole), ("reduce_scatter", whole), ("all_gather", whole)]
        bwd += [("all_gather", whole)] * 2 + [("reduce_scatter", whole)]
    else:
        fwd += [("all_reduce", whole)]
        bwd += [("all_reduce", whole)]
    return fwd, bwd


_PRICE = {"all_reduce": allreduce_s, "all_gather": allgather_s,
          "reduce_scatter": reduce_scatter_s}


def hetplan_moe_tp_comm_s(layer: Layer, mb: float, tp: int, ep: int, sp: bool,
                          link: Link, load: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of `hetplan_moe_tp_messages` over a TP group of `tp` on
    `link`, each message with its own per-step latency (cost_models/comm.py)."""
    fwd, bwd = hetplan_moe_tp_messages(layer, mb, ep, sp, load)
    return (sum(_PRICE[k](n, tp, link) for k, n in fwd),
            sum(_PRICE[k](n, tp, link) for k, n in bwd))
