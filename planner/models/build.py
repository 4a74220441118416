"""Build chain elements from a ModelSpec, with deterministic per-element initialisation.

Each element draws its weights from its own generator seeded by (seed, chain index), on
the CPU in fp32, so a pipeline stage built alone gets exactly the weights the whole model
would: partitions need no weight broadcast.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from planner.graph.spec import ModelSpec
from planner.models.attention import AttentionImpl
from planner.models.chain import Block, ChainModel, Embedding, Head

__all__ = ["build_element", "build_model", "element_seed", "moe_kwargs", "reset_parameters_for"]

_INIT_STD = 0.02  # GPT-2 / Megatron default
_OUT_PROJECTIONS = ("o", "fc2", "w2")  # residual-branch outputs, scaled by depth


def element_seed(seed: int, index: int) -> int:
    """The generator seed of chain element `index` (distinct per element, stable)."""
    return (seed * 1_000_003 + index) % (2**63)


def _normal(shape: torch.Size, std: float, gen: torch.Generator) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=gen)


@torch.no_grad()
def reset_parameters_for(module: nn.Module, index: int, seed: int) -> None:
    """Initialise chain element `module` (at chain `index`) in place, on CPU, deterministically.

    A tied head draws its LM-head weight from the embedding's generator (index 0), so it
    equals the embedding weight even when built on another stage.
    """
    gen = torch.Generator().manual_seed(element_seed(seed, index))
    out_std = getattr(module, "out_init_std", _INIT_STD)
    for name, sub in module.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(sub, nn.Linear):
            if isinstance(module, Head) and module.tied and sub is module.lm_head:
                tok_gen = torch.Generator().manual_seed(element_seed(seed, 0))
                sub.weight.copy_(_normal(sub.weight.shape, _INIT_STD, tok_gen))
            else:
                std = out_std if leaf in _OUT_PROJECTIONS else _INIT_STD
                sub.weight.copy_(_normal(sub.weight.shape, std, gen))
            if sub.bias is not None:
                sub.bias.zero_()
        elif isinstance(sub, nn.Embedding):
            sub.weight.copy_(_normal(sub.weight.shape, _INIT_STD, gen))
        elif isinstance(sub, (nn.LayerNorm, nn.RMSNorm)):
            if sub.weight is not None:
                sub.weight.fill_(1.0)
            if getattr(sub, "bias", None) is not None:
                sub.bias.zero_()


def _construct(spec: ModelSpec, index: int, attn_impl: AttentionImpl, dropout: float) -> nn.Module:
    last = spec.num_layers + 1
    if not 0 <= index <= last:
        raise IndexError(f"chain index {index} outside 0..{last} for {spec.name}")
    if index == 0:
        positions = spec.seq_len if spec.architecture == "gpt" else None
        return Embedding(spec.vocab_size, spec.hidden_size, positions, dropout)
    if index == last:
        return Head(architecture=spec.architecture, hidden_size=spec.hidden_size,
                    vocab_size=spec.vocab_size, norm_eps=spec.norm_eps,
                    tied=spec.tie_embeddings)
    return Block(architecture=spec.architecture, hidden_size=spec.hidden_size,
                 num_heads=spec.num_attention_heads, num_kv_heads=spec.num_kv_heads,
                 ffn_hidden_size=spec.ffn_hidden_size, norm_eps=spec.norm_eps,
                 rope_theta=spec.rope_theta, num_layers=spec.num_layers,
                 attn_impl=attn_impl, dropout=dropout, moe=moe_kwargs(spec, index - 1))


def moe_kwargs(spec: ModelSpec, block: int) -> dict[str, Any] | None:
    """`MoE`'s keyword arguments for block `block` (0-based), or None for a dense block."""
    if not spec.is_moe_block(block):
        return None
    return {"ffn_hidden_size": spec.moe_ffn_hidden_size, "num_experts": spec.num_experts,
            "top_k": spec.num_experts_per_tok,
            "shared_ffn_hidden_size": spec.shared_expert_ffn_hidden_size,
            "shared_gate": spec.shared_expert_gate, "norm_topk_prob": spec.norm_topk_prob}


def build_element(spec: ModelSpec, index: int, *, device: str | torch.device = "meta",
                  dtype: torch.dtype = torch.float32, seed: int = 0,
                  attn_impl: AttentionImpl = "sdpa", dropout: float = 0.0) -> nn.Module:
    """Chain element `index` (0 = embed, 1..L = blocks, L+1 = head) of `spec`.

    On `meta` the weights are left uninitialised (shapes only); elsewhere they are
    initialised on CPU by `reset_parameters_for`, cast to `dtype`, then moved to `device`.
    """
    with torch.device("meta"):
        module = _construct(spec, index, attn_impl, dropout)
    if torch.device(device).type == "meta":
        return module.to(dtype=dtype)
    module.to_empty(device="cpu")
    reset_parameters_for(module, index, seed)
    return module.to(dtype=dtype).to(device)


def build_model(spec: ModelSpec, *, device: str | torch.device = "meta",
                dtype: torch.dtype = torch.float32, seed: int = 0,
                attn_impl: AttentionImpl = "sdpa", dropout: float = 0.0) -> ChainModel:
    """The whole model as a ChainModel (tied embeddings share one Parameter)."""
    kwargs = dict(device=device, dtype=dtype, seed=seed, attn_impl=attn_impl, dropout=dropout)
    elements = [build_element(spec, i, **kwargs) for i in range(spec.num_chain_layers)]
    return ChainModel(elements[0], elements[1:-1], elements[-1],
                      tie_embeddings=spec.tie_embeddings)
