"""Autocast's 16-bit weight copies in hetplan's runtime: each micro-batch's forward runs in its
own `torch.autocast` region over fp32 weights (planner/runtime/engine.py), autocast's cast cache
lives only as long as that region, and each GEMM saves its cast weight for the backward, so a
stage holds one 16-bit copy of its GEMM weights per micro-batch in flight. Measured with
saved-tensor hooks on the real tiny-llama block (CPU autocast, bf16), against `layer_costs`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cost_models.catalog import get_gpu
from cost_models.comm import Link
from cost_models.profiles import ProfileSet
from planner.costing.framework import HETPLAN_RUNTIME, MEGATRON_CORE
from planner.costing.layer_cost import layer_costs
from planner.graph import load_model
from planner.graph.load_spec import load_model_spec
from planner.models import build_element

_LINK = Link(gb_per_s=50.0, latency_s=7e-6)


def _saved_weight_copies(forwards: int) -> int:
    """Bytes of distinct bf16 storages shaped like a GEMM weight that `forwards` forwards of one
    tiny-llama block, each in its own autocast region, keep for their backward."""
    torch.manual_seed(0)
    spec = load_model_spec("tiny-llama")
    block = build_element(spec, 1, device="cpu")
    weights = [p.detach().to(torch.bfloat16) for p in block.parameters() if p.dim() == 2]
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        # A copy is a bf16 tensor equal to a weight's cast, or its transpose (what mm saves); an
    # activation may share a weight's shape.
        if t.dtype == torch.bfloat16 and any(
                v.shape == t.shape and torch.equal(v, t) for w in weights for v in (w, w.t())):
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
    outs = []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for _ in range(forwards):
            with torch.autocast("cpu", torch.bfloat16):
                outs.append(block(x))
    return sum(kept.values())


def _act_bytes(fw, recompute: str = "none") -> tuple[float, float]:
    graph = load_model("tiny-llama").graph
    layer = next(layer for layer in graph.layers if layer.kind == "block")
    out = layer_costs(layer, graph, get_gpu("A100-SXM4-80GB"), 1, 1, recompute, "bf16", False,
                      _LINK, ProfileSet(), fw)
    return out[4], out[6]


def test_each_micro_batch_keeps_its_own_copy_and_the_price_counts_it() -> None:
    one, two = _saved_weight_copies(1), _saved_weight_copies(2)
    assert one > 0 and two == 2 * one  # one copy per forward in flight, not shared
    without = dataclasses.replace(HETPLAN_RUNTIME, autocast_weight_copies=False)
    priced = _act_bytes(HETPLAN_RUNTIME)[0] - _act_bytes(without)[0]
    # The price counts the block's parameters (its norms' weights too: 2·h of them).
    spec = load_model_spec("tiny-llama")
    assert priced == pytest.approx(one + 2 * 2 * spec.hidden_size, rel=1e-9)


def test_full_recompute_keeps_no_copy_but_its_re_run_casts_one() -> None:
    without = dataclasses.replace(HETPLAN_RUNTIME, autocast_weight_copies=False)
    (act, transient), (act0, transient0) = (_act_bytes(HETPLAN_RUNTIME, "full"),
                                            _act_bytes(without, "full"))
    assert act == act0
    assert transient - transient0 == pytest.approx(_act_bytes(HETPLAN_RUNTIME)[0]
                                                   - _act_bytes(without)[0])


def test_stacks_with_16_bit_weights_keep_no_copies() -> None:
    assert not MEGATRON_CORE.autocast_weight_copies
    assert _act_bytes(MEGATRON_CORE) == _act_bytes(
        dataclasses.replace(MEGATRON_CORE, autocast_weight_copies=False))
