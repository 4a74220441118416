"""Synthetic training data: the same global batch on every rank, different each step."""

from __future__ import annotations

import torch

__all__ = ["synthetic_batch"]


def synthetic_batch(step: int, batch: int, seq_len: int, vocab_size: int,
                    seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels), each (batch, seq_len) int64; labels are inputs shifted by one token.

    Seeded by (seed, step) alone, so every rank draws the same batch without talking.
    """
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    tokens = torch.randint(0, vocab_size, (batch, seq_len + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
