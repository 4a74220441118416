"""The last stage's loss transient against the runtime: the real head and `loss_fn`, split by
the real `stage.apply_vocab_tp` over a fake TP group in ONE worker process (`run_local` forks
it), run under `loss_parallel` as runtime/engine.py runs it, and the CPU allocator's every
allocation and free read from torch's profiler (`profile_memory=True`). The transient is
the peak of live bytes above what the forward leaves saved (forward) or above the start of
the backward (backward), whichever is higher; the parameters do not require gradients, so
their gradients (priced as gradients) are not in it."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import pytest
import torch

from cost_models.profiles import ProfileSet
from planner.costing.framework import FRAMEWORKS, Framework
from planner.costing.published_stacks import (
    AMP_DEEPSPEED_MEGATRON,
    MEGATRON_EAGER,
    SAILOR_DEEPSPEED,
)
from planner.costing.stage_cost import stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from planner.models import build_element, loss_fn
from planner.runtime.local import run_local
from planner.runtime.stage import apply_vocab_tp
from tests.test_block_activations import fake_tp
from tests.test_cost_fixtures import gpu


def _live_peak(prof: Any) -> tuple[int, int]:
    """(peak, end) of the running sum of the allocations the profiler saw, in time order."""
    from torch._C._profiler import _EventType

    def walk(nodes: list[Any]) -> Any:
        for n in nodes:
            yield n
            yield from walk(n.children)

    tree = prof.profiler.kineto_results.experimental_event_tree()
    sizes = sorted((n.start_time_ns, n.extra_fields.alloc_size) for n in walk(tree)
                   if n.tag == _EventType.Allocation)
    live = top = 0
    for _, size in sizes:
        live += size
        top = max(top, live)
    return top, live


def _loss_worker(rank: int, world: int, store_dir: str, name: str, tp: int,
                 bf16: bool) -> tuple[int, int]:
    """(forward, backward) transient bytes of the head and its loss on one sequence."""
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.profiler import ProfilerActivity, profile

    spec = load_model_spec(name)
    head = build_element(spec, spec.num_layers + 1, device="cpu")
    with fake_tp(tp) as mesh:
        if tp > 1:
            assert apply_vocab_tp(head, "head", mesh, {}, True)
        for p in head.parameters():
            p.requires_grad_(False)
        x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
        labels = torch.randint(0, spec.vocab_size, (1, spec.seq_len))
        split = loss_parallel if tp > 1 else contextlib.nullcontext
        cast = ((lambda: torch.autocast("cpu", torch.bfloat16)) if bf16
                else contextlib.nullcontext)
        with (profile(activities=[ProfilerActivity.CPU], profile_memory=True) as fwd,
              split(), cast()):
            loss = loss_fn(head(x), labels)
        fwd_peak, saved = _live_peak(fwd)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as bwd, split():
            loss.backward()
        return fwd_peak - saved, _live_peak(bwd)[0]


def _priced(name: str, tp: int, dtype_bytes: int,
            framework: Framework = FRAMEWORKS["hetplan"]) -> float:
    spec = load_model_spec(name)
    graph = dataclasses.replace(extract(spec), dtype_bytes=dtype_bytes)
    last = len(graph.layers) - 1
    cost = stage_cost(graph, last, last + 1, gpu(), tp, 1, "full",
                      precision="fp32" if dtype_bytes == 4 else "bf16", profiles=ProfileSet(),
                      framework=framework)
    return cost.recompute_transient_bytes


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("bf16", [False, True])
def test_the_loss_transient_is_priced_on_the_last_stage(tp: int, bf16: bool) -> None:
    # tiny-llama (seq 32, vocab 256): the backward peaks (8 B per logit at TP 1: the nll
    # gradient and the log-softmax gradient beside the saved log-probabilities; 12 B under
    # loss_parallel: zeros_like, exp and their sum). Before: 0 priced (65,536 B measured at
    # TP 1, 50,212 per TP rank at TP 2).
    fwd, bwd = run_local(_loss_worker, 1, "tiny-llama", tp, bf16)[0]
    measured = max(fwd, bwd)
    priced = _priced("tiny-llama", tp, 2 if bf16 else 4)
    # The loss's own bookkeeping (the labels' int64 copies, masks: a few × seq × 8 B) is the
    # only thing beyond the vocabulary-sized buffers.
    assert priced <= measured <= priced + 8 * 32 * 8, (fwd, bwd, priced)
    assert fwd < bwd  # the two peaks are of different phases: priced apart, not summed


@pytest.mark.parametrize("framework", [FRAMEWORKS["megatron"], FRAMEWORKS["deepspeed"]])
def test_megatron_core_cross_entropy_works_in_place(framework: Framework) -> None:
    # Closed form from megatron/core/tensor_parallel/cross_entropy.py: the fp32 copy is
    # subtracted, exponentiated and normalised in place and becomes the gradient in the
    # backward, so only the 16-bit logits (forward) or the gradient's 16-bit cast (backward)
    # sit beside it: 2 B per logit per TP rank, none for fp32 logits.
    s, v = 32, 256
    for tp in (1, 2):
        assert _priced("tiny-llama", tp, 2, framework) == 2 * s * v / tp
        assert _priced("tiny-llama", tp, 4, framework) == 0.0


@pytest.mark.parametrize("framework", [MEGATRON_EAGER, AMP_DEEPSPEED_MEGATRON, SAILOR_DEEPSPEED])
def test_megatron_1_1_5_cross_entropy_clones_the_logits(framework: Framework) -> None:
    # Closed form from Megatron-LM v1.1.5 megatron/mpu/cross_entropy.py: its caller passes
    # `output.float()` (4 B beside the 2 B fp16 logits), the forward clones it (4 B more) and
    # `logits.exp()` becomes the saved softmax: 10 B per fp16 logit beyond it, 8 B per fp32
    # logit (`.float()` of fp32 logits is the same tensor). Before: 2 B and 0 B (in place).
    s, v = 32, 256
    for tp in (1, 2):
        assert _priced("tiny-llama", tp, 2, framework) == 10 * s * v / tp
        assert _priced("tiny-llama", tp, 4, framework) == 8 * s * v / tp


def test_the_loss_and_recompute_transients_do_not_add() -> None:
    # A stage with blocks and the head under full recompute peaks in one phase: a block's
    # recomputed activations or the loss's buffers, the larger, never their sum.
    spec = load_model_spec("tiny-llama")
    graph = extract(spec)
    last = len(graph.layers) - 1
    args = dict(precision="fp32", profiles=ProfileSet())
    head = stage_cost(graph, last, last + 1, gpu(), 1, 1, "full", **args)
    block = stage_cost(graph, last - 1, last, gpu(), 1, 1, "full", **args)
    both = stage_cost(graph, last - 1, last + 1, gpu(), 1, 1, "full", **args)
    assert head.recompute_transient_bytes == 8 * 32 * 256
    assert both.recompute_transient_bytes == max(head.recompute_transient_bytes,
                                                 block.recompute_transient_bytes)
