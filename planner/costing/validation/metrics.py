"""Accuracy figures: MAPE, Spearman rank correlation, top-1 regret."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["mape", "ranks", "spearman", "top1_regret"]


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    if not measured:
        return float("nan")
    return 100.0 * sum(abs(p - m) / m for p, m in zip(predicted, measured, strict=True)) / len(
        measured)


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Pearson correlation of the ranks (ties averaged)."""
    n = len(measured)
    if n < 2:
        return float("nan")
    rp, rm = ranks(predicted), ranks(measured)
    mp, mm = sum(rp) / n, sum(rm) / n
    cov = sum((a - mp) * (b - mm) for a, b in zip(rp, rm, strict=True))
    vp = sum((a - mp) ** 2 for a in rp)
    vm = sum((b - mm) ** 2 for b in rm)
    return cov / (vp * vm) ** 0.5 if vp > 0 and vm > 0 else float("nan")


def top1_regret(predicted: Sequence[float], measured: Sequence[float],
                lower_is_better: bool = True) -> float:
    """How much worse (percent) the measured value of the plan we rank first is than the best
    measured plan. Ties in the prediction: the first listed row wins (deterministic)."""
    if not measured:
        return float("nan")
    sign = 1.0 if lower_is_better else -1.0
    pick = min(range(len(predicted)), key=lambda i: (sign * predicted[i], i))
    best = min(measured) if lower_is_better else max(measured)
    return 100.0 * abs(measured[pick] - best) / best
