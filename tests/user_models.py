"""A user's own model, importable as `tests.user_models:make_net` (the factory a module plan
records for dryrun and launch)."""

from __future__ import annotations

import torch
from torch import nn

S, H, F, V = 16, 32, 64, 48
"""Sequence, hidden, MLP width, vocabulary."""


class Block(nn.Module):
    # How the runtime splits this block over TP (Megatron: column then row parallel).
    tp_plan = {"up": "colwise", "down": "rowwise"}

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(H, F)
        self.down = nn.Linear(F, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


class Net(nn.Module):
    """The runtime's protocol: `embed`, ordered `layers`, `head`; token ids in, logits out."""

    def __init__(self, blocks: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Block() for _ in range(blocks)])
        self.head = nn.Linear(H, V)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.head(x)


def make_net() -> Net:
    """The same weights on every call (every rank builds it)."""
    torch.manual_seed(1234)
    return Net()
