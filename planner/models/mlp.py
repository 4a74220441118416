"""Feed-forward blocks: GPT's GELU MLP and Llama's SwiGLU, with separate linears for TP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GeluMLP", "SwiGLU"]


class GeluMLP(nn.Module):
    """fc2(gelu(fc1(x))), with biases (GPT-2/GPT-3)."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, ffn_hidden_size)
        self.fc2 = nn.Linear(ffn_hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class SwiGLU(nn.Module):
    """w2(silu(w1(x)) * w3(x)), no biases (Llama): w1 gate, w3 up, w2 down."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden_size, ffn_hidden_size, bias=False)
        self.w3 = nn.Linear(hidden_size, ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(ffn_hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
