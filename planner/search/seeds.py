"""Megatron-style layouts as extra candidates on single-GPU-type clusters.

Outside exhaustive mode the program solves only the tightest bottleneck cap per shape, which
can miss a plain layout a user would try first (e.g. GPT-3 175B on 64 A100s at a small batch:
TP 8 × PP 8 beats the TP 4 plan the tightest cap leads to). On a homogeneous cluster the
Megatron grid — TP a power of two within a node, PP dividing the rest, even layer splits,
every recompute mode — is small, so every such layout is costed by `estimate` too and the
search can never return a plan slower than the best of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from planner.cluster.model import Cluster
from planner.costing.megatron import megatron_plan
from planner.errors import HetplanError
from planner.schema import Plan
from planner.search.tables import RECOMPUTE

__all__ = ["megatron_layouts"]


def megatron_layouts(model: Any, cluster: Cluster, gbs: int, sizes: list[int],
                     num_layers: int) -> Iterator[Plan]:
    """Every valid Megatron (TP, PP, DP, micro-batch, recompute) layout using all GPUs."""
    if len(cluster.groups) != 1:
        return
    group = cluster.groups[0]
    world = group.gpus
    tp = 1
    while tp <= group.gpus_per_node:
        rest = world // tp
        for pp in (p for p in range(1, min(rest, num_layers) + 1) if rest % p == 0):
            dp = rest // pp
            for b in sizes:
                if gbs % (dp * b) or gbs // (dp * b) < pp:
                    continue
                for rc in RECOMPUTE:
                    try:
                        yield megatron_plan(model, cluster, tp=tp, pp=pp, dp=dp, micro_batch=b,
                                            global_batch=gbs, recompute=rc, zero1=dp > 1)
                    except HetplanError:
                        break  # this TP does not divide the heads, or the split is invalid
        tp *= 2
