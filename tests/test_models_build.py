"""Our GPT / Llama modules: deterministic per-element init, tying, attention paths, TP shapes."""

from __future__ import annotations

import copy

import pytest
import torch

from planner.graph.spec import ModelSpec
from planner.models import build_element, build_model, loss_fn
from planner.models.attention import Attention


def _spec(arch: str, kv: int = 4, **kw) -> ModelSpec:
    base = dict(name=f"t-{arch}", architecture=arch, hidden_size=64, num_layers=3,
                num_attention_heads=4, num_kv_heads=kv, vocab_size=97, seq_len=16)
    return ModelSpec.from_dict({**base, **kw})


SPECS = [_spec("gpt"), _spec("llama", kv=2), _spec("llama", kv=4, tie_embeddings=True)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-kv{s.num_kv_heads}")
def test_every_element_built_alone_matches_the_whole_model(spec: ModelSpec) -> None:
    whole = build_model(spec, device="cpu", seed=7)
    for index, element in enumerate(whole.chain()):
        alone = build_element(spec, index, device="cpu", seed=7)
        mine, theirs = element.state_dict(), alone.state_dict()
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert torch.equal(mine[key], theirs[key]), (index, key)


def test_seed_and_index_change_the_weights() -> None:
    spec = SPECS[0]
    a = build_model(spec, device="cpu", seed=0)
    b = build_model(spec, device="cpu", seed=1)
    assert not torch.equal(a.layers[0].attn.q.weight, b.layers[0].attn.q.weight)
    assert not torch.equal(a.layers[0].attn.q.weight, a.layers[1].attn.q.weight)


def test_tied_head_shares_the_embedding_parameter() -> None:
    model = build_model(SPECS[0], device="cpu")
    assert model.head.lm_head.weight is model.embed.tok.weight
    assert model.tied_pairs() == [("embed.tok.weight", "head.lm_head.weight")]
    n_unique = sum(p.numel() for p in model.parameters())  # parameters() dedups shared tensors
    n_all = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert n_all - n_unique == 97 * 64
    assert build_model(SPECS[1], device="cpu").tied_pairs() == []


@pytest.mark.parametrize("spec", SPECS[:2], ids=["gpt", "llama-gqa"])
def test_sdpa_and_math_attention_agree_and_chain_is_forward(spec: ModelSpec) -> None:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, spec.vocab_size, (2, spec.seq_len), generator=gen)
    fast = build_model(spec, device="cpu", seed=3)
    slow = build_model(spec, device="cpu", seed=3, attn_impl="math")
    x = tokens
    for element in fast.chain():
        x = element(x)
    assert x.shape == (2, spec.seq_len, spec.vocab_size)
    torch.testing.assert_close(fast(tokens), slow(tokens), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x, fast(tokens))


def test_causality_future_tokens_do_not_change_past_logits() -> None:
    model = build_model(SPECS[1], device="cpu")
    tokens = torch.randint(0, 97, (1, 16))
    changed = tokens.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 97
    torch.testing.assert_close(model(tokens)[:, :10], model(changed)[:, :10])


def test_loss_is_mean_cross_entropy() -> None:
    logits = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    manual = -torch.log_softmax(logits, -1).gather(-1, labels[..., None]).mean()
    torch.testing.assert_close(loss_fn(logits, labels), manual)


def _rope_reference(x: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE (Su et al., 2021) in the rotate-half layout on (batch, seq, heads, head_dim):
    element i pairs with i + d/2 as the complex number x_i + j·x_(i+d/2), turned by
    pos · theta^(-2i/d) radians (complex multiplication, independent of the module's cos/sin
    tables)."""
    d = x.shape[-1]
    pos = torch.arange(x.shape[1], dtype=torch.float64)
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(pos), d // 2, dtype=torch.float64),
                       torch.outer(pos, freq))[None, :, None, :]
    z = torch.complex(x[..., : d // 2], x[..., d // 2:]) * turn
    return torch.cat((z.real, z.imag), dim=-1)


def test_rope_reference_scores_depend_only_on_relative_position() -> None:
    q = torch.randn(1, 1, 1, 8, dtype=torch.double).expand(1, 12, 1, 8)
    k = torch.randn(1, 1, 1, 8, dtype=torch.double).expand(1, 12, 1, 8)
    scores = (_rope_reference(q, 1e4)[0, :, 0] @ _rope_reference(k, 1e4)[0, :, 0].T)
    torch.testing.assert_close(scores[3, 1], scores[9, 7])  # offset 2 both


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_forward_equals_rope_then_causal_softmax(kv_heads: int) -> None:
    # The module's rotation (one cos/sin table for q and k) against the reference, then
    # softmax(q·kᵀ/√d + causal mask)·v written out, grouped-query heads repeated.
    torch.manual_seed(0)
    attn = Attention(32, 4, kv_heads, bias=False, rope_theta=1e4).double()
    x = torch.randn(2, 10, 32, dtype=torch.double)
    hd = attn.head_dim
    q = _rope_reference(attn.q(x).view(2, 10, 4, hd), 1e4).transpose(1, 2)
    k = _rope_reference(attn.k(x).view(2, 10, kv_heads, hd), 1e4).transpose(1, 2)
    v = attn.v(x).view(2, 10, kv_heads, hd).transpose(1, 2)
    k, v = (t.repeat_interleave(4 // kv_heads, dim=1) for t in (k, v))
    mask = torch.full((10, 10), float("-inf"), dtype=torch.double).triu(1)
    probs = torch.softmax(q @ k.transpose(-2, -1) / hd ** 0.5 + mask, dim=-1)
    want = attn.o((probs @ v).transpose(1, 2).reshape(2, 10, 32))
    torch.testing.assert_close(attn(x), want)


@pytest.mark.parametrize("spec", SPECS[:2], ids=["gpt", "llama-gqa"])
def test_megatron_split_of_a_block_sums_to_the_whole(spec: ModelSpec) -> None:
    """Two TP shards (column-split q/k/v/fc1, row-split o/fc2) run unmodified and sum up."""
    block = build_element(spec, 1, device="cpu", seed=5).double()
    x = torch.randn(2, spec.seq_len, spec.hidden_size, dtype=torch.double)
    attn_in = block.attn_norm(x)
    whole = block.attn(attn_in)
    hd = block.attn.head_dim
    total = torch.zeros_like(whole)
    for rank in range(2):
        shard = copy.deepcopy(block.attn)
        for name in ("q", "k", "v"):
            lin = getattr(shard, name)
            rows = lin.weight.shape[0] // 2
            sl = slice(rank * rows, (rank + 1) * rows)
            lin.weight = torch.nn.Parameter(lin.weight[sl])
            if lin.bias is not None:
                lin.bias = torch.nn.Parameter(lin.bias[sl])
        cols = shard.o.weight.shape[1] // 2
        shard.o.weight = torch.nn.Parameter(shard.o.weight[:, rank * cols:(rank + 1) * cols])
        bias = shard.o.bias
        shard.o.bias = None
        total = total + shard(attn_in)
        assert shard.q(attn_in).shape[-1] // hd == spec.num_attention_heads // 2
    if bias is not None:
        total = total + bias
    torch.testing.assert_close(total, whole)


def test_meta_build_has_no_storage_and_runs() -> None:
    model = build_model(_spec("llama", kv=2), device="meta", dtype=torch.bfloat16)
    assert model.layers[0].attn.q.weight.is_meta
    out = model(torch.zeros(1, 16, dtype=torch.long, device="meta"))
    assert out.shape == (1, 16, 97) and out.dtype == torch.bfloat16
