"""Dynamic loss scaling for fp16 (V100, T4 and other GPUs without bf16).

The last stage multiplies each micro-batch's loss by the scale before backward, so every
gradient in the pipeline, including those sent between stages, is scaled alike. After the
gradient sync each rank checks its gradients for inf/NaN; one all-reduce tells every rank
whether any rank overflowed: then all skip the step and halve the scale, otherwise all
unscale and step, and the scale doubles after `growth_interval` clean steps (the policy of
torch.amp.GradScaler, made global across the plan's ranks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from planner.runtime.grads import local_tensor

__all__ = ["LossScaler"]


class LossScaler:
    def __init__(self, init_scale: float = 2.0**16, growth_interval: int = 2000) -> None:
        self.scale = init_scale
        self.growth_interval = growth_interval
        self._clean = 0

    @torch.no_grad()
    def unscale_or_skip(self, grads: list[torch.Tensor], device: torch.device) -> bool:
        """Unscale `grads` in place and return True, or return False (skip this step)."""
        local = [local_tensor(g) for g in grads]
        bad = torch.zeros((), device=device)
        for g in local:
            if not torch.isfinite(g).all():
                bad.fill_(1.0)
                break
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item():
            self.scale /= 2.0
            self._clean = 0
            return False
        for g in local:
            g.mul_(1.0 / self.scale)
        self._clean += 1
        if self._clean % self.growth_interval == 0:
            self.scale *= 2.0
        return True
