"""Closed-form iteration time and bubble of uniform pipelines with free p2p.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021), §2.2: with S stages, m micro-batches, forward f and backward b per stage
and micro-batch, GPipe and 1F1B take (m + S − 1)(f + b); interleaving V chunks per device cuts the
bubble to (S − 1)(f + b)/V, i.e. (S − 1)/(V·m) of the ideal time m(f + b).
"""

from __future__ import annotations

__all__ = ["uniform_bubble_fraction", "uniform_makespan_s"]


def uniform_makespan_s(fwd_s: float, bwd_s: float, stages: int, microbatches: int,
                       virtual_stages: int = 1) -> float:
    """Iteration time of S identical stages (f, b per stage and micro-batch), zero p2p."""
    return (microbatches + (stages - 1) / virtual_stages) * (fwd_s + bwd_s)


def uniform_bubble_fraction(stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Idle share of the iteration: (S−1)/V over (m + (S−1)/V); V = 1 gives (S−1)/(m+S−1)."""
    bubble = (stages - 1) / virtual_stages
    return bubble / (microbatches + bubble)
