"""Learning-rate schedule: linear warm-up to the peak, then cosine decay to the minimum.

The curve of Megatron-LM's and nanoGPT's `cosine` style: step s (0-based, the optimizer update
of iteration s + 1) uses peak · (s + 1) / warmup during warm-up, then
min + (peak − min) · ½ · (1 + cos(π · t)) with t the fraction of the decay span done,
and the minimum after it. A function of the step alone, so a resumed run continues the
same curve when it passes the same schedule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["LrSchedule", "set_lr"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LrSchedule:
    peak_lr: float
    """The learning rate at the end of warm-up."""
    min_lr: float | None = None
    """The floor of the cosine decay; None: constant peak_lr (no decay)."""
    warmup_steps: int = 0
    """Steps of linear warm-up from peak / warmup to peak."""
    decay_steps: int | None = None
    """The step the cosine reaches min_lr (counted from step 0, warm-up included)."""

    def __post_init__(self) -> None:
        if self.peak_lr <= 0:
            raise ValueError(f"peak learning rate {self.peak_lr} must be > 0")
        if self.min_lr is not None and not 0 <= self.min_lr <= self.peak_lr:
            raise ValueError(f"min lr {self.min_lr} must lie in [0, peak lr {self.peak_lr}]")
        if self.warmup_steps < 0:
            raise ValueError(f"warm-up steps {self.warmup_steps} must be >= 0")
        if self.decay_steps is not None and self.decay_steps <= self.warmup_steps:
            raise ValueError(f"decay steps {self.decay_steps} must exceed warm-up steps "
                             f"{self.warmup_steps}")

    def lr_at(self, step: int) -> float:
        """The learning rate of the update at 0-based `step`."""
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        if self.min_lr is None or self.decay_steps is None:
            return self.peak_lr
        if step >= self.decay_steps:
            return self.min_lr
        done = (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
        return self.min_lr + (self.peak_lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * done))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Use `lr` for every parameter group of `optimizer` from its next step on."""
    for group in optimizer.param_groups:
        group["lr"] = lr
