"""What the stage-cutting program (`partition.py`) works with and returns: a stage device
option, the stages it chose, and the pipeline template with its objective terms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.search.tables import OptionCosts

__all__ = ["Option", "StageChoice", "Template", "objective"]


@dataclass(frozen=True, slots=True)
class Option:
    """A stage device: TP group of `costs.tp` GPUs from budget slot `slot`."""

    slot: int
    units: int
    """Budget units one stage uses (TP degree / the island's unit)."""
    costs: OptionCosts
    tail_s: np.ndarray
    """(n+1, n+1): DP all-reduce + optimizer step of the stage, exposed after the pipeline."""


@dataclass(frozen=True, slots=True)
class StageChoice:
    start: int
    end: int
    option: int
    """Index into the options given to `solve`."""
    recompute: int
    """Index into tables.RECOMPUTE."""
    time_s: float
    send_s: float
    tail_s: float


@dataclass(frozen=True, slots=True)
class Template:
    """One pipeline: its stages and the terms of the objective."""

    stages: tuple[StageChoice, ...]
    usage: tuple[int, ...]
    """GPUs per budget slot."""

    @property
    def sum_s(self) -> float:
        return sum(s.time_s + 2 * s.send_s for s in self.stages)

    @property
    def max_time_s(self) -> float:
        return max(s.time_s for s in self.stages)

    @property
    def max_tail_s(self) -> float:
        return max(s.tail_s for s in self.stages)

    def pipeline_s(self, microbatches: int) -> float:
        """1F1B/GPipe estimate: Σ (t + 2·send) + (m − 1)·max t."""
        return self.sum_s + (microbatches - 1) * self.max_time_s

    def key(self) -> tuple:
        return tuple((s.start, s.end, s.option, s.recompute) for s in self.stages)


def objective(t: Template, m: int) -> float:
    """The program's objective at `m` micro-batches: Σ (t + 2·send) + max ((m − 1)·t + tail)."""
    return t.sum_s + max((m - 1) * s.time_s + s.tail_s for s in t.stages)
