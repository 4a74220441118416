"""The model as a chain: embedding, transformer blocks, head — each consumes the previous output.

Chain index 0 is `embed`, 1..L are `layers.0`..`layers.{L-1}`, L+1 is `head`, the same
order as the LayerGraph, so a pipeline stage is a contiguous slice of `chain()`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from planner.models.attention import Attention, AttentionImpl
from planner.models.mlp import GeluMLP, SwiGLU
from planner.models.moe import MoE
from planner.models.ops import dropout

__all__ = ["Block", "ChainModel", "Embedding", "Head", "loss_fn"]


class Embedding(nn.Module):
    """Token embedding (+ learned positions for GPT): (b, s) int64 → (b, s, h)."""

    def __init__(self, vocab_size: int, hidden_size: int, max_positions: int | None,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, hidden_size)
        self.pos = nn.Embedding(max_positions, hidden_size) if max_positions else None
        self.dropout = dropout
        self.context: Any = None
        """Context parallelism (set by the runtime): the positions of this rank's tokens."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        if self.pos is not None:
            s = tokens.shape[1]
            at = (torch.arange(s, device=tokens.device) if self.context is None
                  else self.context.positions(s, tokens.device))
            x = x + self.pos(at)
        return dropout(x, self.dropout, self.training)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, *, architecture: str, hidden_size: int, num_heads: int,
                 num_kv_heads: int, ffn_hidden_size: int, norm_eps: float, rope_theta: float,
                 num_layers: int, attn_impl: AttentionImpl = "sdpa",
                 dropout: float = 0.0, moe: dict[str, Any] | None = None) -> None:
        super().__init__()
        gpt = architecture == "gpt"
        norm = nn.LayerNorm if gpt else nn.RMSNorm
        self.attn_norm = norm(hidden_size, eps=norm_eps)
        self.attn = Attention(hidden_size, num_heads, num_kv_heads, bias=gpt,
                              rope_theta=None if gpt else rope_theta, impl=attn_impl,
                              dropout=dropout)
        self.mlp_norm = norm(hidden_size, eps=norm_eps)
        # `moe`: MoE's keyword arguments (a mixture-of-experts block), None for a dense MLP.
        self.mlp = (MoE(hidden_size, **moe) if moe is not None
                    else (GeluMLP if gpt else SwiGLU)(hidden_size, ffn_hidden_size))
        self.dropout = dropout
        # GPT-2's scaled init of the residual-branch outputs keeps the residual stream's
        # variance flat with depth.
        self.out_init_std = 0.02 / (2 * num_layers) ** 0.5

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.dropout, self.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._drop(self.attn(self.attn_norm(x)))
        return x + self._drop(self.mlp(self.mlp_norm(x)))


class Head(nn.Module):
    """Final norm + LM head: (b, s, h) → logits (b, s, V)."""

    def __init__(self, *, architecture: str, hidden_size: int, vocab_size: int,
                 norm_eps: float, tied: bool) -> None:
        super().__init__()
        norm = nn.LayerNorm if architecture == "gpt" else nn.RMSNorm
        self.norm = norm(hidden_size, eps=norm_eps)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
        self.tied = tied
        """lm_head.weight is (a copy of, or the same tensor as) the embedding's weight."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))


class ChainModel(nn.Module):
    """embed → layers → head; `chain()` lists the elements in LayerGraph order."""

    def __init__(self, embed: Embedding, layers: list[Block], head: Head, *,
                 tie_embeddings: bool) -> None:
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(layers)
        self.head = head
        self.tie_embeddings = tie_embeddings
        if tie_embeddings:
            self.head.lm_head.weight = self.embed.tok.weight

    def chain(self) -> list[nn.Module]:
        return [self.embed, *self.layers, self.head]

    def tied_pairs(self) -> list[tuple[str, str]]:
        """Parameter names that must stay equal: sum their grads when on different stages."""
        return [("embed.tok.weight", "head.lm_head.weight")] if self.tie_embeddings else []

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = tokens
        for element in self.chain():
            x = element(x)
        return x


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all (b, s) positions, computed in fp32."""
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten())
