"""torchtitan's layer-level selective activation checkpointing over one stage: every N-th
transformer block fully checkpointed, the others keeping everything they save.

torchtitan (torchtitan/distributed/activation_checkpoint.py, `_apply_layer_sac`) counts the
blocks it wraps in one process-wide counter, starting at 1, and wraps a block in
`checkpoint_wrapper` when `count % N == 0` (`selective_ac_option = "N"`). A stage of B blocks
therefore re-runs the forward of floor(B / N) of them in its backward (blocks N, 2N, ... of
the stage) and keeps only their inputs; the others are priced as without recompute. The
per-layer average (`sac_cost`, 1/N of each block) is what the search's prefix tables hold;
this is the stage's own count, which `stage_cost` (and so `estimate`) prices.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from planner.costing.framework import Framework
from planner.graph.layers import LayerGraph
from planner.limits import MAX_LAYERS

if TYPE_CHECKING:  # stage_cost imports this module
    from planner.costing.stage_cost import LayerCostTable, StageCost

__all__ = ["TORCHTITAN_POLICIES", "checkpointed_blocks", "every_nth_block_stage",
           "with_selective_ac"]


def checkpointed_blocks(graph: LayerGraph, start: int, end: int, every: int) -> list[int]:
    """Indices of the layers of [start, end) that are fully checkpointed: the blocks whose
    1-based count within the range is a multiple of `every`."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    blocks = [i for i in range(start, end) if graph.layers[i].kind == "block"]
    return blocks[every - 1::every]


def every_nth_block_stage(graph: LayerGraph, none: LayerCostTable, full: LayerCostTable,
                          start: int, end: int, every: int) -> StageCost:
    """The `StageCost` of layers [start, end) with every `every`-th block fully checkpointed,
    from the stage's prefix tables without recompute (`none`) and with full recompute
    (`full`, both `LayerCostTable`s of the same configuration): each checkpointed layer's
    backward, recompute time and saved activations taken from `full`; the largest transient
    over the stage's layers from whichever table prices each layer."""
    base = none.stage(start, end)
    picked = checkpointed_blocks(graph, start, end, every)
    if not picked:
        return base
    bwd = recompute = act = ctx_act = 0.0
    for i in picked:
        bwd += (full.bwd_s[i + 1] - full.bwd_s[i]) - (none.bwd_s[i + 1] - none.bwd_s[i])
        recompute += full.recompute_s[i + 1] - full.recompute_s[i]
        act += ((full.activation_bytes[i + 1] - full.activation_bytes[i])
                - (none.activation_bytes[i + 1] - none.activation_bytes[i]))
        if none.context_activation_bytes or full.context_activation_bytes:
            ctx_act += (_step(full.context_activation_bytes, i)
                        - _step(none.context_activation_bytes, i))
    chosen = set(picked)

    def transient(i: int) -> float:
        return (full if i in chosen else none).transient_bytes[i]

    worst = max(range(start, end), key=transient)
    table = full if worst in chosen else none
    return dataclasses.replace(
        base,
        bwd_s=base.bwd_s + bwd,
        recompute_s=base.recompute_s + recompute,
        activation_bytes_per_microbatch=base.activation_bytes_per_microbatch + act,
        context_activation_bytes_per_microbatch=(
            base.context_activation_bytes_per_microbatch + ctx_act),
        recompute_transient_bytes=transient(worst),
        context_transient_bytes=(table.context_transient_bytes[worst]
                                 if table.context_transient_bytes else 0.0),
    )


def _step(prefix: tuple[float, ...], i: int) -> float:
    """Layer i's entry of a prefix-sum column that may be empty (no such part)."""
    return prefix[i + 1] - prefix[i] if prefix else 0.0


TORCHTITAN_POLICIES = ("torchtitan-op", "torchtitan-layer")
"""`Framework.sac_policy` values of the stacks that take torchtitan's `selective_ac_option`."""


def with_selective_ac(fw: Framework, option: str | None, uses_selective: bool) -> Framework:
    """`fw` pricing `selective` recompute with torchtitan's `selective_ac_option`: "op" (its
    per-op policy) or a positive block interval N (every N-th block fully checkpointed).
    None: `fw` as it is. HetplanError (one line) for a framework without the option, a plan
    without selective recompute, or a malformed option."""
    from planner.errors import HetplanError

    if option is None:
        return fw
    text = option.strip()
    if fw.sac_policy not in TORCHTITAN_POLICIES:
        raise HetplanError(f"--selective-ac {option}: torchtitan's selective_ac_option; the "
                           f"{fw.name} framework has no such option (use --framework "
                           "torchtitan)")
    if not uses_selective:
        raise HetplanError(f"--selective-ac {option}: applies to selective recompute; use "
                           "--recompute selective (a plan file: stages with recompute "
                           "selective)")
    if text == "op":
        return dataclasses.replace(fw, sac_policy="torchtitan-op")
    if not (text.isascii() and text.isdigit()) or int(text) < 1 or int(text) > MAX_LAYERS:
        raise HetplanError(f"--selective-ac {option!r}: use op or a block interval N from 1 "
                           f"to {MAX_LAYERS} (every N-th block fully checkpointed)")
    return dataclasses.replace(fw, sac_policy="torchtitan-layer", sac_every=int(text))
