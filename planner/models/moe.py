"""Mixture-of-experts feed-forward: a top-k router over SwiGLU experts (Mixtral, Qwen-MoE,
DeepSeek-MoE), optionally with an always-on shared expert.

Tokens are sorted by expert and each expert runs once on its contiguous slice (dropless: no
capacity limit, nothing dropped). On the meta device, where routing has no data, every
expert gets an equal share of the T·k routed token copies (balanced routing): the extractor
then counts exactly the top-k FLOPs and the bytes the routed copies save. The runtime swaps
`dispatch` for an expert-parallel one that runs remote experts through an all-to-all.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from planner.models.mlp import SwiGLU

__all__ = ["MoE", "balanced_counts", "local_dispatch"]

Dispatch = Callable[["MoE", torch.Tensor, torch.Tensor], torch.Tensor]


def balanced_counts(copies: int, experts: int) -> list[int]:
    """`copies` routed token copies spread as evenly as possible over `experts`."""
    return [copies // experts + (1 if e < copies % experts else 0) for e in range(experts)]


def _counts(flat_idx: torch.Tensor, experts: int) -> list[int]:
    if flat_idx.device.type == "meta":
        return balanced_counts(flat_idx.numel(), experts)
    return torch.bincount(flat_idx, minlength=experts).tolist()


def local_dispatch(moe: MoE, xs: torch.Tensor, counts: torch.Tensor | list[int]) -> torch.Tensor:
    """Every expert on this process: expert e runs on the next counts[e] rows of `xs`."""
    chunks = xs.split(list(counts))
    return torch.cat([expert(c) for expert, c in zip(moe.experts, chunks, strict=True)])


class MoE(nn.Module):
    """y = Σ_top-k w_e · expert_e(x) (+ shared(x), optionally sigmoid-gated)."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_experts: int, top_k: int, *,
                 shared_ffn_hidden_size: int = 0, shared_gate: bool = False,
                 norm_topk_prob: bool = True) -> None:
        super().__init__()
        self.router = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(hidden_size, ffn_hidden_size)
                                     for _ in range(num_experts))
        self.shared = (SwiGLU(hidden_size, shared_ffn_hidden_size) if shared_ffn_hidden_size
                       else None)
        self.shared_gate = (nn.Linear(hidden_size, 1, bias=False)
                            if shared_gate and shared_ffn_hidden_size else None)
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.dispatch: Dispatch = local_dispatch
        """Runs the experts on tokens sorted by expert; the runtime's expert parallelism
        replaces it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(flat).float(), dim=-1)
        weights, idx = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        flat_idx = idx.reshape(-1)
        order = torch.argsort(flat_idx, stable=True)
        token = order // self.top_k
        ys = self.dispatch(self, flat[token], _counts(flat_idx, self.num_experts))
        ys = ys * weights.reshape(-1)[order].to(ys.dtype)[:, None]
        out = torch.zeros_like(flat).index_add(0, token, ys)
        if self.shared is not None:
            s = self.shared(flat)
            if self.shared_gate is not None:
                s = torch.sigmoid(self.shared_gate(flat)) * s
            out = out + s
        return out.reshape(shape)
