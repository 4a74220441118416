"""The model side: the chain protocol, this rank's chunks, TP sharding and recompute.

A model the runtime can run is anything with `embed`, `layers` (ordered) and `head`
(final norm + LM head), each taking one tensor and returning one: token ids → hidden → ... →
logits. `chain()` may give that list directly; `loss_fn(logits, labels)` defaults to
token-mean cross entropy. Every rank builds the same full model (the factory's init is
deterministic) and keeps only its chunks, so any partition starts from the same weights.
Tied weights (one Parameter in both embedding and head) are found by identity.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from planner.errors import HetplanError

__all__ = [
    "ChunkModule",
    "ParamKey",
    "ParamLayout",
    "apply_recompute",
    "apply_tp",
    "apply_vocab_tp",
    "chain_of",
    "default_loss",
    "loss_of",
    "param_keys",
    "parallel_loss_ok",
    "shared_input_branches",
    "vocab_modules",
]

ParamKey = tuple[int, str]
"""(chain element, parameter name inside it) where a parameter first appears in the chain."""


def chain_of(model: Any) -> list[nn.Module]:
    """[embed, *layers, head]: the chain the plan's layer ranges index."""
    if hasattr(model, "chain"):
        return list(model.chain())
    missing = [a for a in ("embed", "layers", "head") if not hasattr(model, a)]
    if missing:
        raise HetplanError(f"model {type(model).__name__} lacks {', '.join(missing)}; the runtime "
                           "needs `embed`, ordered `layers` and `head` (or a `chain()` method)")
    return [model.embed, *model.layers, model.head]


def default_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def loss_of(model: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return getattr(model, "loss_fn", None) or default_loss


def parallel_loss_ok(loss: Callable[..., Any]) -> bool:
    """Whether `loss` is a token-mean cross-entropy that torch's `loss_parallel` can run on
    logits split over the vocabulary (ours; a user's own loss gets whole logits)."""
    from planner.models.chain import loss_fn

    return loss in (default_loss, loss_fn)


ParamLayout = tuple[dict[ParamKey, ParamKey], dict[ParamKey, tuple[int, ...]]]


def param_keys(chain: list[nn.Module]) -> ParamLayout:
    """(element, name) → the key of the parameter it names (a tied weight has one key, where
    it first appears), and key → every chain element the parameter appears in."""
    first: dict[int, ParamKey] = {}
    key_of: dict[ParamKey, ParamKey] = {}
    elements: dict[ParamKey, list[int]] = {}
    for e, module in enumerate(chain):
        for name, p in module.named_parameters(remove_duplicate=False):
            key = first.setdefault(id(p), (e, name))
            key_of[(e, name)] = key
            if e not in elements.setdefault(key, []):
                elements[key].append(e)
    return key_of, {k: tuple(v) for k, v in elements.items()}


# Megatron's split for the extractor's blocks (planner.models): column-parallel into the
# attention heads / MLP width, row-parallel back out. A user's block may define `tp_plan`.
_COLWISE = ("q", "k", "v", "fc1", "w1", "w3")
_ROWWISE = ("o", "fc2", "w2")


def _tp_plan(block: nn.Module) -> dict[str, str]:
    own = getattr(block, "tp_plan", None)
    if own is not None:
        return dict(own() if callable(own) else own)
    plan = {}
    for name, m in block.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(m, nn.Linear) and leaf in _COLWISE:
            plan[name] = "colwise"
        elif isinstance(m, nn.Linear) and leaf in _ROWWISE:
            plan[name] = "rowwise"
    return plan


def shared_input_branches(block: nn.Module, plan: dict[str, str]) -> list[str]:
    """The branches (`attn`, `mlp`) of a planner.models block whose column-parallel linears
    should share one DTensor input, as torchtitan's `apply_tp` does: their Partial input
    gradients then sum as a DTensor and ONE collective per branch runs backward (Megatron's
    fused QKV / gate-up), not one per linear (q, k, v, w1, w3), which the cost model prices.
    Only our own modules (whose forward is DTensor-safe); a mixture-of-experts branch keeps
    its per-expert linears (moe_tp_comm.py)."""
    from planner.models.attention import Attention
    from planner.models.mlp import GeluMLP, SwiGLU

    out = []
    for branch, kinds in (("attn", (Attention,)), ("mlp", (GeluMLP, SwiGLU))):
        if not isinstance(getattr(block, branch, None), kinds):
            continue
        mine = [n for n in plan if n.partition(".")[0] == branch]
        if mine and all(n.count(".") == 1 for n in mine):
            out.append(branch)
    return out


def apply_tp(block: nn.Module, mesh: Any, where: str, sequence_parallel: bool = False) -> bool:
    """Shard a transformer block Megatron-style over a 1-D DTensor mesh (in place).

    Returns whether sequence parallelism was applied (asked for, and the block has the
    pre-norm structure it needs; see seqpar.py)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        parallelize_module,
    )

    tp = mesh.size()
    plan = _tp_plan(block)
    if not plan:
        raise HetplanError(f"{where}: TP {tp} needs column/row-parallel linears, found none; "
                           "give the block a `tp_plan` dict (name → 'colwise' | 'rowwise')")
    for name, style in plan.items():
        lin = block.get_submodule(name)
        width = lin.out_features if style == "colwise" else lin.in_features
        if width % tp:
            raise HetplanError(f"{where}.{name}: width {width} does not divide by TP {tp}; "
                               "choose a TP degree that divides the heads and the MLP width")
    styles: dict[str, Any] = {n: ColwiseParallel() if s == "colwise" else RowwiseParallel()
                              for n, s in plan.items()}
    for branch in shared_input_branches(block, plan):
        # Replicate in, Replicate kept, but handed on as a DTensor (not a local tensor).
        styles[branch] = PrepareModuleInput(input_layouts=(Replicate(),),
                                            desired_input_layouts=(Replicate(),),
                                            use_local_output=False)
    sp = None
    if sequence_parallel:
        from planner.runtime.seqpar import sp_styles

        sp = sp_styles(block, plan)
        styles.update(sp or {})
    # Every TP rank built the same weights, so each keeps its slice without a scatter.
    parallelize_module(block, mesh, styles, src_data_rank=None)
    return sp is not None


def vocab_modules(element: nn.Module, kind: str) -> list[tuple[str, nn.Module]]:
    """The vocabulary-sized modules of an embedding or head element: the token table (our
    models' `tok`, else the largest `nn.Embedding`; position tables stay whole), or the head's
    `nn.Linear` layers with the largest output width (the LM head)."""
    if kind == "embedding":
        if isinstance(getattr(element, "tok", None), nn.Embedding):
            return [("tok", element.tok)]  # also when positions outnumber the vocabulary
        tables = [(n, m) for n, m in element.named_modules() if isinstance(m, nn.Embedding)]
        return [max(tables, key=lambda nm: nm[1].num_embeddings)] if tables else []
    heads = [(n, m) for n, m in element.named_modules() if isinstance(m, nn.Linear)]
    width = max((m.out_features for _, m in heads), default=0)
    return [(n, m) for n, m in heads if m.out_features == width]


def apply_vocab_tp(element: nn.Module, kind: str, mesh: Any,
                   tied: dict[int, nn.Parameter], shard_logits: bool = False) -> bool:
    """Split the token embedding (rows) or the LM head (output columns) over the TP mesh, as
    Megatron's vocab-parallel layers do: the embedding's partial lookups are all-reduced and
    its gradient computed for its own rows alone (`vocab_embed.py`). The head's logits stay
    split over the vocabulary (`shard_logits`: a DTensor for a loss run under `loss_parallel`,
    Megatron's parallel cross-entropy) or are all-gathered (any loss function then sees whole
    logits). Only when the TP degree divides the vocabulary (no
    padding rows); returns whether it split.

    `tied` maps id(original weight) → its split parameter across calls on one rank, so a head
    tied to an embedding on the same rank stays one parameter."""
    from torch.distributed.tensor.parallel import parallelize_module

    from planner.runtime.vocab_embed import split_embedding

    tp = mesh.size()
    found = vocab_modules(element, kind)
    if not found:
        return False
    first = found[0][1]
    size = first.num_embeddings if isinstance(first, nn.Embedding) else first.out_features
    if size % tp:
        return False
    for _, m in found:
        original = m.weight
        # Every TP rank built the same weights, so each keeps its slice without a scatter.
        if not (kind == "embedding" and split_embedding(m, mesh)):
            parallelize_module(m, mesh, _vocab_style(kind, shard_logits), src_data_rank=None)
        if id(original) in tied:  # the other end of a tie already split: share its param
            m.weight = tied[id(original)]
        else:
            tied[id(original)] = m.weight
    return True


def _vocab_style(kind: str, shard_logits: bool) -> Any:
    """DTensor's style for the LM head, and for a token table `split_embedding` cannot run
    (max_norm, ...): DTensor's own lookup, whose gradient comes back whole and is cut to the
    rows only at the sync (`grads.settle_grad`)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if kind == "embedding":
        return RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
    if shard_logits:
        return ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    return ColwiseParallel(output_layouts=Replicate())


def apply_recompute(block: nn.Module, mode: str) -> None:
    """full: recompute the whole block in backward; selective: only its attention core."""
    if mode == "none":
        return
    targets = [block]
    if mode == "selective":
        from planner.models.attention import CoreAttention

        cores = [m for m in block.modules()
                 if isinstance(m, CoreAttention) or getattr(m, "selective_recompute", False)]
        targets = cores or targets
    for m in targets:
        m.forward = functools.partial(checkpoint, m.forward, use_reentrant=False)


@dataclass
class ChunkModule:
    """The chain elements of one chunk, applied in order."""

    elements: list[nn.Module]
    sequence_parallel: frozenset[int] = frozenset()
    """Positions in `elements` of blocks that run sequence-parallel over `mesh`."""
    mesh: Any = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sequence_parallel:
            for m in self.elements:
                x = m(x)
            return x
        from planner.runtime.seqpar import gather_sequence, scatter_sequence

        inside = False
        for i, m in enumerate(self.elements):
            if (i in self.sequence_parallel) != inside:
                x = gather_sequence(x, self.mesh) if inside else scatter_sequence(x, self.mesh)
                inside = not inside
            x = m(x)
        return gather_sequence(x, self.mesh) if inside else x
