"""Mixture-of-experts models: parameter counts against published totals, top-k FLOPs against the
closed form, the routed layer against a per-token loop, and spec errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import planner
from planner.errors import SpecError
from planner.graph.spec import ModelSpec
from planner.models.moe import MoE

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("model", "total_b", "active_b"), [
    # Jiang et al. 2024 (arXiv:2401.04088): 46.7B total, 12.9B active.
    ("mixtral-8x7b", 46.7, 12.9),
    # Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated.
    (str(FIXTURES / "qwen1.5-moe-a2.7b" / "config.json"), 14.3, 2.7),
    # DeepSeekMoE paper (arXiv:2401.06066): 16.4B total, 2.8B activated.
    (str(FIXTURES / "deepseek-moe-16b" / "config.json"), 16.4, 2.8),
])
def test_parameters_match_published_totals(model: str, total_b: float, active_b: float) -> None:
    graph = planner.load_model(model).graph
    assert graph.params / 1e9 == pytest.approx(total_b, rel=0.005)
    # Published active counts are rounded to one decimal (±0.05 B).
    assert abs(graph.active_params / 1e9 - active_b) <= 0.05 + 1e-9


def test_expert_flops_are_top_k_and_params_all_experts() -> None:
    spec = planner.load_model("mixtral-8x7b").spec
    graph = planner.load_model("mixtral-8x7b").graph
    block = graph.layers[1]
    s, h, f, k, e = spec.seq_len, spec.hidden_size, spec.ffn_hidden_size, 2, 8
    assert block.fwd_expert_flops == 2 * s * k * 3 * h * f  # three GEMMs per SwiGLU expert
    assert block.expert_params == e * 3 * h * f
    router = 2 * s * h * e
    dense = planner.load_model(spec.replace(num_experts=0, num_experts_per_tok=0,
                                            moe_ffn_hidden_size=None)).graph.layers[1]
    # The MoE block = the dense block − one MLP + k MLPs + the router.
    one_mlp = 2 * s * 3 * h * f
    assert block.fwd_flops == dense.fwd_flops - one_mlp + k * one_mlp + router
    assert block.a2a_bytes == s * k * h * 2


def test_first_dense_layers_and_shared_expert() -> None:
    graph = planner.load_model(str(FIXTURES / "deepseek-moe-16b" / "config.json")).graph
    blocks = [layer for layer in graph.layers if layer.kind == "block"]
    assert blocks[0].num_experts == 0 and blocks[0].params == 4 * 2048 * 2048 + 3 * 2048 * 10944 \
        + 2 * 2048
    assert all(b.num_experts == 64 for b in blocks[1:])
    shared = 3 * 2048 * 2 * 1408
    assert blocks[1].params == (4 * 2048 * 2048 + 64 * 3 * 2048 * 1408 + shared + 64 * 2048
                                + 2 * 2048)


def test_routed_layer_matches_a_per_token_loop() -> None:
    torch.manual_seed(0)
    moe = MoE(16, 24, num_experts=4, top_k=2, shared_ffn_hidden_size=8, shared_gate=True,
              norm_topk_prob=False)
    x = torch.randn(2, 5, 16)
    out = moe(x)
    flat = x.reshape(-1, 16)
    ref = []
    for t in flat:
        p = torch.softmax(moe.router(t), dim=-1)
        w, i = p.topk(2)
        y = sum(w[j] * moe.experts[int(i[j])](t) for j in range(2))
        y = y + torch.sigmoid(moe.shared_gate(t)) * moe.shared(t)
        ref.append(y)
    assert torch.allclose(out.reshape(-1, 16), torch.stack(ref), atol=1e-6)


@pytest.mark.parametrize(("changes", "field"), [
    ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
    ({"first_dense_layers": 32}, "first_dense_layers"),
    ({"architecture": "gpt"}, "num_experts"),
    ({"num_experts": 0}, "num_experts_per_tok"),
])
def test_bad_moe_fields_name_the_field(changes: dict, field: str) -> None:
    data = planner.load_model("mixtral-8x7b").spec.to_dict() | changes
    with pytest.raises(SpecError) as err:
        ModelSpec.from_dict(data, where="m.yaml")
    assert field in str(err.value)


def test_dense_specs_carry_no_moe_fields() -> None:
    assert "num_experts" not in planner.load_model("llama3-8b").spec.to_dict()
