"""`from_module`: a user's own nn.Module, cut at its largest ModuleList, against closed forms."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import planner
from planner.errors import HetplanError
from planner.graph import from_module, load_model
from planner.models import build_model, loss_fn

S, H, F, V = 16, 32, 64, 50


class UserBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(H, F)
        self.down = nn.Linear(F, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class UserNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.adapters = nn.ModuleList([nn.Identity()])  # a smaller list: not the blocks
        self.body = nn.ModuleList([UserBlock() for _ in range(3)])
        self.out = nn.Linear(H, V)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for block in self.body:
            x = block(x)
        return self.out(x)


def test_user_module_is_cut_at_its_largest_module_list() -> None:
    model = from_module(UserNet(), torch.zeros(2, S, dtype=torch.long), name="user")
    layers = model.layers
    assert [layer.name for layer in layers] == ["embed", "body.0", "body.1", "body.2", "head"]
    assert [layer.kind for layer in layers] == ["embedding", "block", "block", "block", "head"]
    assert model.precision == "fp32" and model.seq_len == S and model.name == "user"
    block_params = H * F + F + F * H + H
    assert [layer.params for layer in layers] == [V * H, *[block_params] * 3, H * V + V]
    gemm = 2 * S * (H * F + F * H)  # per sequence: the example's batch of 2 is divided out
    for block in layers[1:4]:
        assert block.fwd_flops == gemm
        assert block.bwd_act_flops == gemm and block.bwd_weight_flops == gemm
        # Saved (fp32): up's input (s·h), ReLU's output = down's input (s·f, one storage).
        assert block.activation_bytes == 4 * S * (H + F)
        assert block.output_bytes == 4 * S * H
        assert block.max_tp == 32  # gcd of the Linear widths
    head = layers[-1]
    assert head.fwd_flops == 2 * S * H * V and head.bwd_act_flops == 2 * S * H * V
    assert head.output_bytes == 0
    assert layers[0].fwd_flops == 0 and layers[0].bwd_act_flops == 0


def test_from_module_on_our_model_agrees_with_extract() -> None:
    spec = load_model("tiny").spec

    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = build_model(spec, dtype=torch.float32)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return loss_fn(self.model(tokens), tokens)

    tokens = torch.zeros(1, spec.seq_len, dtype=torch.long, device="meta")
    user = planner.from_module(WithLoss(), tokens)
    ours = load_model(spec)
    for a, b in zip(user.layers, ours.layers, strict=True):
        for key in ("params", "fwd_flops", "bwd_act_flops", "bwd_weight_flops",
                    "activation_bytes", "activation_bytes_selective", "output_bytes"):
            assert getattr(a, key) == getattr(b, key), (a.name, key)


def test_module_without_module_list_is_a_clear_error() -> None:
    with pytest.raises(HetplanError, match="no nn.ModuleList"):
        from_module(nn.Sequential(nn.Linear(4, 4)), torch.zeros(2, 4))


def test_precision_must_match_the_module_dtype() -> None:
    with pytest.raises(HetplanError, match="precision='fp32'"):
        from_module(UserNet(), torch.zeros(1, S, dtype=torch.long), precision="bf16")
