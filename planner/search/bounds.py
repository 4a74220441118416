"""A lower bound on any plan's iteration time, used to skip shapes that cannot win.

Every micro-batch must pass every layer once, forward and backward, on some GPU group. Let
c[l, g] be the fewest GPU-seconds layer l takes on group g at any TP degree (TP degree × the
layer's time, no recompute). A plan whose pipelines draw at most U_g GPUs of group g for T
seconds offers U_g·T GPU-seconds there; weighting groups by w_g = 1 / C_g (C_g = Σ_l c[l, g]):

    T · Σ_g U_g·w_g  ≥  M · Σ_l min_g c[l, g]·w_g

for M micro-batches, because whichever group runs a layer spends at least that weighted time.
The estimate's pipeline time is at least any device's busy time, so this bounds it from below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from planner.search.tables import OptionCosts

__all__ = ["LayerBound", "layer_bound"]


class LayerBound:
    """Per-group GPU-seconds per micro-batch of every layer, at one micro-batch size."""

    def __init__(self, per_layer: Mapping[int, np.ndarray]) -> None:
        self.groups = tuple(sorted(per_layer))
        self.c = np.stack([per_layer[g] for g in self.groups])  # (groups, layers)
        self.total = self.c.sum(axis=1)

    def iteration_s(self, microbatches: int, gpus: Mapping[int, int]) -> float:
        """Lower bound on the time of `microbatches` micro-batches on at most `gpus` per group."""
        rows = [k for k, g in enumerate(self.groups) if gpus.get(g, 0) > 0]
        if not rows:
            return float("inf")
        w = 1.0 / self.total[rows]
        offered = sum(gpus[self.groups[k]] * w[i] for i, k in enumerate(rows))
        need = (self.c[rows] * w[:, None]).min(axis=0).sum()
        return float(microbatches * need / offered)


def layer_bound(options: Sequence[OptionCosts]) -> LayerBound:
    per: dict[int, np.ndarray] = {}
    for c in options:
        # GPU-seconds per layer and micro-batch: a cp option's time is each of its cp GPUs'.
        diag = np.diagonal(c.time_s[0], offset=1) * c.tp * c.cp
        diag = np.where(np.isfinite(diag), diag, np.inf)
        per[c.group] = diag if c.group not in per else np.minimum(per[c.group], diag)
    return LayerBound(per)
