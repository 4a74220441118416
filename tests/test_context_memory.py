"""The gathered K/V of context parallelism in stage memory: hetplan's runtime all-gathers K and
V over the cp group (runtime/context.py), so attention saves the whole sequences' K/V for its
backward and gets their whole gradients. Priced against the closed form
2 · seq · kv_heads · head_dim · bytes · micro-batch / tp, and against the tensors the
runtime's attention really saves (saved-tensor hooks, one process). Each query chunk attends
causally to the key prefix up to its own end: no position mask is held."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import planner
from cost_models.catalog import get_gpu
from cost_models.comm import Link
from cost_models.memory import FRAMEWORK_OVERHEAD_GIB, GIB
from cost_models.profiles import ProfileSet
from planner.costing.framework import Framework
from planner.costing.stage_cost import stage_cost
from planner.costing.stage_memory import stage_memory
from planner.models.attention import Attention
from planner.runtime.context import ContextShard

A100 = get_gpu("A100-SXM4-80GB")
LINK = Link(100.0, 1e-6)


def _graph(seq_len: int = 64):
    model = planner.load_model("tiny-llama")
    return planner.load_model(model.spec.replace(seq_len=seq_len)).graph


def _kv_whole(spec: Any, mb: int, tp: int, dtype_bytes: int) -> float:
    """K and V of the micro-batch's whole sequences on one TP rank's KV heads."""
    head_dim = spec.hidden_size // spec.num_attention_heads
    return 2 * spec.seq_len * spec.num_kv_heads * head_dim * dtype_bytes * mb / tp


def _cost(graph, cp: int, tp: int, mb: int, recompute: str, **kw):
    # Embedding and blocks: the head's stage peaks in its loss's buffers when they outweigh a
    # block's backward (test_head_peak.py), where no K/V is gathered.
    return stage_cost(graph, 0, len(graph.layers) - 1, A100, tp, mb, recompute, precision="bf16",
                      cp=cp, cp_link=LINK if cp > 1 else None, profiles=ProfileSet(), **kw)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize(("cp", "tp", "mb"), [(2, 1, 1), (4, 2, 2)])
def test_gathered_kv_closed_form(cp: int, tp: int, mb: int, recompute: str) -> None:
    graph = _graph()
    spec = planner.load_model("tiny-llama").spec.replace(seq_len=64)
    blocks = sum(1 for lay in graph.layers if lay.kind == "block")
    whole = _kv_whole(spec, mb, tp, graph.dtype_bytes)
    cost = _cost(graph, cp, tp, mb, recompute)
    base = _cost(graph, cp, tp, mb, recompute, framework=Framework(cp_ring_overlap=True))
    remote = whole * (cp - 1) / cp  # other ranks' K/V, beyond this rank's own share
    saved = 0.0 if recompute == "full" else blocks * remote
    transient = 1.5 * whole + (remote if recompute == "full" else 0.0)
    assert cost.context_activation_bytes_per_microbatch == pytest.approx(saved, rel=1e-12)
    assert cost.context_transient_bytes == pytest.approx(transient, rel=1e-12)
    # Added to what the ring (which never holds the whole sequence) keeps.
    assert cost.activation_bytes_per_microbatch - base.activation_bytes_per_microbatch == (
        pytest.approx(saved, rel=1e-9))
    assert cost.recompute_transient_bytes - base.recompute_transient_bytes == pytest.approx(
        transient, rel=1e-9)
    assert base.context_transient_bytes == 0 == base.context_activation_bytes_per_microbatch


def test_stage_memory_shows_it_apart_and_the_parts_still_sum() -> None:
    graph = _graph()
    cost = _cost(graph, 4, 1, 1, "selective")
    mem = stage_memory(cost, 3)
    expect = (3 * cost.context_activation_bytes_per_microbatch
              + cost.context_transient_bytes) / GIB
    assert mem.context_gib == pytest.approx(expect, rel=1e-12) and mem.context_gib > 0
    assert mem.activations_gib == pytest.approx(
        3 * (cost.activation_bytes_per_microbatch
             - cost.context_activation_bytes_per_microbatch) / GIB, rel=1e-12)
    assert mem.other_gib == pytest.approx(
        (cost.recompute_transient_bytes - cost.context_transient_bytes) / GIB
        + FRAMEWORK_OVERHEAD_GIB, rel=1e-12)
    assert mem.to_dict()["context"] == round(mem.context_gib, 6)
    assert "context" not in stage_memory(_cost(graph, 1, 1, 1, "selective"), 3).to_dict()


class _LocalShard(ContextShard):
    """A cp rank's shard without a process group: the gather places this rank's two chunks
    at their positions among the other ranks' (zeros here), so shapes and saved tensors are
    the runtime's."""

    def __init__(self, cp: int, index: int) -> None:
        self.group, self.cp, self.index = None, cp, index
        self.order = list(range(cp))
        self.grads: list[torch.Size] = []

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[2] // 2
        mine = {self.index: x.narrow(2, 0, half),
                2 * self.cp - 1 - self.index: x.narrow(2, half, half)}
        whole = torch.cat([mine.get(c, torch.zeros_like(mine[self.index]))
                           for c in range(2 * self.cp)], dim=2)
        whole.register_hook(lambda g: self.grads.append(g.shape))
        return whole


def _saved_bytes(attn: Attention, x: torch.Tensor, calls: int) -> int:
    """Bytes of the distinct storages autograd saves for `calls` forwards (weights apart)."""
    weights = {p.untyped_storage().data_ptr() for p in attn.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in weights:
            seen[st.data_ptr()] = st.nbytes()
        return t

    outs = []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outs = [attn(x) for _ in range(calls)]
    sum(o.sum() for o in outs).backward()
    return sum(seen.values())


@pytest.mark.parametrize("index", [0, 1, 3])
def test_runtime_attention_saves_the_gathered_kv_and_no_mask(index: int) -> None:
    # The runtime's Attention (tiny-llama shape: 4 heads, 2 KV heads of 16) on one cp rank's
    # 16 of 64 tokens, cp 4, fp32, two forwards (two micro-batches or two blocks of a stage):
    # beyond what whole-sequence-free attention on the same tokens saves, each keeps the
    # other ranks' K/V, and nothing else: no position mask.
    torch.manual_seed(0)
    seq, cp, hidden = 64, 4, 64
    spec = planner.load_model("tiny-llama").spec.replace(seq_len=seq)
    attn = Attention(hidden, 4, 2, bias=False, rope_theta=10000.0)
    x = torch.randn(1, seq // cp, hidden, requires_grad=True)
    local = _saved_bytes(attn, x, 2)
    shard = _LocalShard(cp, index)
    attn.context = shard
    gathered = _saved_bytes(attn, x, 2)
    whole = _kv_whole(spec, 1, 1, 4)
    assert gathered - local == 2 * whole * (cp - 1) / cp
    # The backward gets the whole sequence's K and V gradients (then all-reduced).
    assert sorted(shard.grads) == [torch.Size([1, 2, seq, 16])] * 4
    assert sum(4 * torch.Size(g).numel() for g in shard.grads) == 2 * whole
