"""`estimate` against what hetplan's runtime does with a vocab-split embedding and LM head,
measured on the real chain elements split by the real `stage.apply_vocab_tp`, in ONE worker
process over a fake TP process group (shapes and autograd are the runtime's; collectives move
nothing; forked by `run_local`, so this process starts no process group): the bytes the
head and its loss save for the backward (saved-tensor hooks), the parameters each TP rank
holds, and the collectives each pass runs (the profiler's record of the c10d calls).
Expected figures come from those runs; the prices from `stage_cost`."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.distributed.tensor import DTensor

from cost_models.comm import allreduce_s
from cost_models.profiles import ProfileSet
from planner.costing.links import link_of_kind
from planner.costing.stage_cost import stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from planner.models import build_element, loss_fn
from planner.runtime.local import run_local
from planner.runtime.stage import apply_vocab_tp
from tests.test_block_activations import composite_norm_bytes, fake_tp
from tests.test_cost_fixtures import gpu
from tests.test_moe_tp_collectives import _collectives as collectives


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _split(name: str, tp: int, mesh: Any) -> tuple[Any, torch.nn.Module, torch.nn.Module]:
    spec = load_model_spec(name)
    emb = build_element(spec, 0, device="cpu")
    head = build_element(spec, spec.num_layers + 1, device="cpu")
    assert apply_vocab_tp(emb, "embedding", mesh, {}, True)
    assert apply_vocab_tp(head, "head", mesh, {}, True)
    return spec, emb, head


def _head_worker(rank: int, world: int, store_dir: str, name: str, tp: int) -> int:
    with fake_tp(tp) as mesh:
        spec, _, head = _split(name, tp, mesh)
        return _head_saved_bytes(spec, head)


def _held_worker(rank: int, world: int, store_dir: str, name: str, tp: int) -> list[int]:
    with fake_tp(tp) as mesh:
        _, emb, head = _split(name, tp, mesh)
        return [sum(_local(p).numel() for p in m.parameters()) for m in (emb, head)]


def _head_saved_bytes(spec: Any, head: torch.nn.Module) -> int:
    """Bytes of the distinct storages the head and its loss (under `loss_parallel`, as
    runtime/engine.py runs it) save for the backward of one sequence; weights apart, and the
    labels too (the runtime holds the step's labels anyway, and the graph counts none)."""
    from torch.distributed.tensor.parallel import loss_parallel

    x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
    labels = torch.randint(0, spec.vocab_size, (1, spec.seq_len))
    skip = {_local(p).untyped_storage().data_ptr() for p in head.parameters()}
    skip.add(labels.untyped_storage().data_ptr())
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = _local(t).untyped_storage()
        if st.data_ptr() not in skip:
            kept[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = head(x)
        with loss_parallel():
            loss_fn(out, labels)
    return sum(kept.values())


@pytest.mark.parametrize("name", ["tiny-llama", "tiny"])
@pytest.mark.parametrize("tp", [2, 4])
def test_head_keeps_its_hidden_inputs_whole_and_splits_the_logprobs(name: str, tp: int) -> None:
    # The final norm's input and the LM head's input are whole on every TP rank; only the
    # loss's fp32 log-probabilities split. Before: everything / TP (tiny-llama fp32 TP 2:
    # 28,738 B priced, 41,092 kept on CPU, 32,900 of them on a GPU, whose fused RMSNorm does
    # not keep the normalised copy). Priced the same with SP (the runtime gathers the
    # sequence before the head) and under any recompute (the head is never recomputed;
    # before, full recompute priced only its input: 4,096 B at TP 2).
    spec = load_model_spec(name)
    measured = run_local(_head_worker, 1, name, tp)[0] - composite_norm_bytes(name)
    graph = extract(spec)
    last = len(graph.layers) - 1
    for recompute in ("none", "selective", "full"):
        for sp in (False, True):
            cost = stage_cost(graph, last, last + 1, gpu(), tp, 1, recompute,
                              sequence_parallel=sp, precision=spec.training.precision,
                              profiles=ProfileSet())
            assert cost.activation_bytes_per_microbatch == measured, (recompute, sp)
            assert cost.recompute_s == 0.0


@pytest.mark.parametrize("name", ["tiny-llama", "tiny"])
def test_each_tp_rank_holds_the_position_table_and_final_norm_whole(name: str) -> None:
    # GPT's learned position table (tiny: 32 × 64) and the final norm's weight (and bias)
    # stay whole on every TP rank; only the token table's rows and the LM head's columns
    # split. Before: tiny's embedding 9,216 elements priced vs 10,240 held at TP 2.
    tp = 2
    spec = load_model_spec(name)
    held = run_local(_held_worker, 1, name, tp)[0]
    graph = extract(spec)
    last = len(graph.layers) - 1
    for (start, end), n in zip(((0, 1), (last, last + 1)), held, strict=True):
        cost = stage_cost(graph, start, end, gpu(), tp, 1, "none",
                          precision=spec.training.precision, profiles=ProfileSet())
        assert cost.params_per_gpu == n, (start, n)


def _all_reduces(run: Any) -> list[int]:
    """Elements of each c10d all-reduce `run()` issues (the profiler sees the ones DTensor's
    loss handlers issue from inside its dispatch too)."""
    return [n for kind, n in collectives(run, 1) if kind == "all_reduce"]


def embedding_and_head_passes(emb: Any, head: Any, ids: torch.Tensor, x: torch.Tensor,
                              count: Any) -> dict[str, tuple[Any, Any]]:
    """`count(run)` of the embedding's and the head's forward and backward (the head's loss
    and its backward under loss_parallel, as the runtime's last stage runs them)."""
    from torch.distributed.tensor.parallel import loss_parallel

    out: dict[str, torch.Tensor] = {}

    def head_fwd() -> None:
        with loss_parallel():
            out["head"] = loss_fn(head(x), ids)

    def head_bwd() -> None:
        with loss_parallel():
            out["head"].backward()

    return {"embedding": (count(lambda: out.update(emb=emb(ids))),
                          count(lambda: out["emb"].sum().backward())),
            "head": (count(head_fwd), count(head_bwd))}


def _collectives_worker(rank: int, world: int, store_dir: str,
                        tp: int) -> dict[str, tuple[list[int], list[int]]]:
    """The all-reduces tiny-llama's split embedding and head run, per pass."""
    with fake_tp(tp) as mesh:
        spec, emb, head = _split("tiny-llama", tp, mesh)
        ids = torch.randint(0, spec.vocab_size, (1, spec.seq_len))
        x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
        return embedding_and_head_passes(emb, head, ids, x, _all_reduces)


def test_each_pass_prices_the_collectives_it_runs() -> None:
    # The embedding all-reduces its partial lookups forward, nothing backward; the head
    # nothing forward but the loss's three per-token numbers, and its input's gradient
    # backward. Before: one s·h all-reduce priced in both passes of both layers.
    tp = 2
    spec = load_model_spec("tiny-llama")
    runs = run_local(_collectives_worker, 1, tp)[0]
    assert runs == {"embedding": ([spec.seq_len * spec.hidden_size], []),
                    "head": ([spec.seq_len] * 3, [spec.seq_len * spec.hidden_size])}
    graph = extract(spec)
    last = len(graph.layers) - 1
    g = gpu()
    slow, fast = 10.0, 100.0  # GB/s: only the collectives differ between the two
    for (start, end), (fwd, bwd) in zip(((0, 1), (last, last + 1)), runs.values(),
                                        strict=True):
        cost = {bw: stage_cost(graph, start, end, g, tp, 1, "none", precision="fp32",
                               intra_node_gb_per_s=bw, profiles=ProfileSet())
                for bw in (slow, fast)}

        def delta(sizes: list[int]) -> float:
            return sum(allreduce_s(4.0 * n, tp, link_of_kind(g.intra_node_link, slow))
                       - allreduce_s(4.0 * n, tp, link_of_kind(g.intra_node_link, fast))
                       for n in sizes)

        assert cost[slow].fwd_s - cost[fast].fwd_s == pytest.approx(delta(fwd), rel=1e-9,
                                                                    abs=1e-15)
        assert cost[slow].bwd_s - cost[fast].bwd_s == pytest.approx(delta(bwd), rel=1e-9,
                                                                    abs=1e-15)
