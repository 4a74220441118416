"""Small functional pieces shared by the modules."""

from __future__ import annotations

import torch

__all__ = ["dropout"]


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout that saves a 1-byte boolean mask for backward on every device.

    F.dropout does so only with the fused CUDA kernel; on CPU (and meta) it saves a mask
    in the input's dtype, which would make measured activation bytes device-dependent.
    """
    if not training or p <= 0.0:
        return x
    return torch.native_dropout(x, p, True)[0]
