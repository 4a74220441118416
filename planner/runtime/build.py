"""Build the model a rank needs: the plan's model spec, with only this rank's elements real.

The whole chain is built on the meta device (shapes and ties only, no memory); the elements
this rank runs are then built for real by `planner.models.build_element`, whose init is
seeded per chain element, so they carry exactly the weights the whole model would have.
A tied weight whose two elements both live on this rank is tied again (one Parameter).
"""

from __future__ import annotations

from typing import Any

import torch

from planner.errors import SpecError
from planner.graph.embedded import graph_of, is_module_model
from planner.graph.spec import ModelSpec
from planner.models import build_element, build_model
from planner.runtime.stage import ParamLayout, param_keys
from planner.runtime.topology import rank_view
from planner.schema import Plan

__all__ = ["build_for_rank", "spec_of", "tokens_of"]


def spec_of(plan: Plan) -> ModelSpec:
    if plan.model is None:
        raise SpecError("plan", "model", "the plan carries no model spec; embed one (plan files "
                        "always do) or pass a model factory")
    return ModelSpec.from_dict(plan.model, where="plan.model")


def tokens_of(plan: Plan) -> tuple[int, int]:
    """(seq_len, vocab_size) of the plan's model, for synthetic token batches."""
    if is_module_model(plan.model):
        graph, _ = graph_of(plan.model)
        vocab = graph.layers[0].vocab_size
        if vocab <= 0:
            raise SpecError("plan", "model", "the module's embedding has no token table, so "
                            "synthetic tokens cannot be drawn; pass data_loader=")
        return graph.seq_len, vocab
    spec = spec_of(plan)
    return spec.seq_len, spec.vocab_size


def build_for_rank(spec: ModelSpec, plan: Plan, rank: int, *, seed: int = 0,
                   dtype: torch.dtype = torch.float32) -> tuple[Any, ParamLayout]:
    """A ChainModel whose elements outside this rank's chunks stay on meta (CPU otherwise),
    and the parameter layout of the whole model (taken before any element is replaced, so
    it is the same on every rank)."""
    model = build_model(spec, device="meta", dtype=dtype)
    chain = model.chain()
    layout = param_keys(chain)
    key_of = layout[0]
    mine = sorted({e for ch in rank_view(plan, rank).chunks for e in range(*ch.layers)})
    real = {e: build_element(spec, e, device="cpu", dtype=dtype, seed=seed) for e in mine}
    for (e, name), (e0, name0) in key_of.items():
        if e in real and e0 in real and (e, name) != (e0, name0):
            owner, _, attr = name.rpartition(".")
            sub = real[e].get_submodule(owner) if owner else real[e]
            setattr(sub, attr, real[e0].get_parameter(name0))
    for e, m in real.items():
        if e == 0:
            model.embed = m
        elif e == len(chain) - 1:
            model.head = m
        else:
            model.layers[e - 1] = m
    return model, layout
