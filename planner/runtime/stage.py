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
    "chain_of",
    "default_loss",
    "loss_of",
    "param_keys",
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


def apply_tp(block: nn.Module, mesh: Any, where: str, sequence_parallel: bool = False) -> bool:
    """Shard a transformer block Megatron-style over a 1-D DTensor mesh (in place).

    Returns whether sequence parallelism was applied (asked for, and the block has the
    pre-norm structure it needs; see seqpar.py)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
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
    sp = None
    if sequence_parallel:
        from planner.runtime.seqpar import sp_styles

        sp = sp_styles(block, plan)
        styles.update(sp or {})
    # Every TP rank built the same weights, so each keeps its slice without a scatter.
    parallelize_module(block, mesh, styles, src_data_rank=None)
    return sp is not None


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
