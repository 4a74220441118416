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

__all__ = ["LayerBound", "budget_gpus", "cost_floor_usd", "layer_bound"]


class LayerBound:
    """Per-group GPU-seconds per micro-batch of every layer, at one micro-batch size."""

    def __init__(self, per_layer: Mapping[int, np.ndarray]) -> None:
        self.groups = tuple(sorted(per_layer))
        self.c = np.stack([per_layer[g] for g in self.groups])  # (groups, layers)
        self.total = self.c.sum(axis=1)

    def iteration_s(self, microbatches: int, gpus: Mapping[int, float]) -> float:
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


def cost_floor_usd(options: Sequence[OptionCosts], prices: Sequence[float | None],
                   microbatches: int) -> float | None:
    """Least $ any plan spends on `microbatches` micro-batches (None without every price).

    A plan pays price_g per second for each GPU of group g it uses, for the whole iteration,
    and a GPU is paid at least while it computes; so the bill is at least
    M · Σ_l min_g price_g · c[l, g] / 3600, whichever GPUs the plan leaves idle.
    """
    per: dict[int, np.ndarray] = {}
    for c in options:
        diag = np.diagonal(c.time_s[0], offset=1) * c.tp * c.cp  # as in layer_bound
        diag = np.where(np.isfinite(diag), diag, np.inf)
        per[c.group] = diag if c.group not in per else np.minimum(per[c.group], diag)
    if any(prices[g] is None for g in per):
        return None
    rows = np.stack([per[g] * float(prices[g]) for g in sorted(per)])  # type: ignore[arg-type]
    return float(microbatches * rows.min(axis=0).sum() / 3600.0)


def budget_gpus(bound: LayerBound, gpus: Sequence[int], prices: Sequence[float | None],
                budget_usd_per_hour: float | None) -> dict[int, float]:
    """The GPUs (fractional) that maximise Σ U_g·w_g within the budget: the LP relaxation of
    which GPUs a plan under the budget may use, so the layer bound with them holds for every
    such plan. Free or unpriced groups count whole (unpriced ones can never be under a
    budget, so counting them only loosens the bound)."""
    if budget_usd_per_hour is None:
        return {g: float(k) for g, k in enumerate(gpus)}
    w = dict(zip(bound.groups, 1.0 / bound.total, strict=True))
    out: dict[int, float] = {}
    left = budget_usd_per_hour
    priced = []
    for g, k in enumerate(gpus):
        p = prices[g]
        if p is None:
            continue  # a plan using it has no price, so no plan under a budget uses it
        if p <= 0:
            out[g] = float(k)
        else:
            priced.append((-w.get(g, 0.0) / p, g, k, p))
    for _, g, k, p in sorted(priced):  # fractional knapsack: best value per dollar first
        take = min(float(k), left / p)
        if take <= 0:
            break
        out[g] = take
        left -= take * p
    return out
