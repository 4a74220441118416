"""The TP collectives of a vocab-split embedding and LM head under sequence parallelism, per
pass, for the stacks that keep the sequence split from the embedding through the final norm.

torchtitan: its own TP plan for the embedding and the head (parallelize_llama `apply_tp`:
`"tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))`,
`"norm": SequenceParallel()`, `"output": ColwiseParallel(input_layouts=Shard(1),
output_layouts=Shard(-1), use_local_output=False)` with `loss_parallel`), applied to our
chain elements over a fake TP group in ONE worker process (`run_local` forks it); torch's
profiler records the c10d calls of each pass. Megatron-Core: the closed form of its code
(megatron/core/tensor_parallel/layers.py `VocabParallelEmbedding` with
`reduce_scatter_embeddings`, `LinearWithGradAccumulationAndAsyncCommunication` with
`sequence_parallel`; mappings.py for the backward of each; language_model_embedding.py for
the learned-position path). Prices from `stage_cost` at two link speeds, so that only the
collectives differ, against the ring / NCCL closed forms of `cost_models.comm`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from cost_models.comm import allgather_s, allreduce_s
from cost_models.profiles import ProfileSet
from planner.costing.framework import HETPLAN_RUNTIME, MEGATRON_CORE, TORCHTITAN, Framework
from planner.costing.links import link_of_kind
from planner.costing.stage_cost import stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from planner.models import build_element
from planner.runtime.local import run_local
from tests.test_block_activations import fake_tp
from tests.test_cost_fixtures import gpu
from tests.test_moe_tp_collectives import _collectives as collectives
from tests.test_vocab_tp_pricing import embedding_and_head_passes

_KINDS = {"all_reduce": "ar", "all_gather_into_tensor": "ag", "reduce_scatter_tensor": "rs"}
_SLOW, _FAST = 10.0, 100.0  # GB/s: the two link speeds whose price difference is compared


def _collectives(run: Any, tp: int) -> list[tuple[str, int]]:
    """(kind, elements of the whole tensor) of each all-reduce, all-gather (its gathered
    result) and reduce-scatter (its unreduced input) that `run()` issues."""
    return [(_KINDS[kind], n) for kind, n in collectives(run, tp)]


def _torchtitan_worker(rank: int, world: int, store_dir: str,
                       tp: int) -> dict[str, tuple[list[tuple[str, int]], ...]]:
    """The collectives torchtitan's TP styles run on tiny-llama's embedding and head."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    torch.set_num_threads(1)
    spec = load_model_spec("tiny-llama")
    with fake_tp(tp) as mesh:
        emb = build_element(spec, 0, device="cpu")
        head = build_element(spec, spec.num_layers + 1, device="cpu")
        parallelize_module(emb, mesh, {"tok": RowwiseParallel(input_layouts=Replicate(),
                                                               output_layouts=Shard(1))})
        parallelize_module(head, mesh, {
            "norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                       use_local_output=False)})
        ids = torch.randint(0, spec.vocab_size, (1, spec.seq_len))
        # The last block hands on its sequence slice (RowwiseParallel(output_layouts=Shard(1))
        # with a local output), which the final norm takes as this rank's Shard(1).
        x = torch.randn(1, spec.seq_len // tp, spec.hidden_size, requires_grad=True)
        return embedding_and_head_passes(emb, head, ids, x, lambda run: _collectives(run, tp))


def _price(kind: str, elements: int, tp: int, gb_per_s: float) -> float:
    link = link_of_kind(gpu().intra_node_link, gb_per_s)
    fn = allreduce_s if kind == "ar" else allgather_s  # a ring RS costs what an AG does
    return fn(4.0 * elements, tp, link)


def _delta(found: list[tuple[str, int]], tp: int) -> float:
    return sum(_price(k, n, tp, _SLOW) - _price(k, n, tp, _FAST) for k, n in found)


def _priced_deltas(name: str, fw: Framework, tp: int,
                   sp: bool = True) -> dict[str, tuple[float, float]]:
    """(forward, backward) price difference between the two link speeds of the embedding and
    the head of `name`, each priced alone as a stage."""
    spec = load_model_spec(name)
    graph = extract(spec)
    last = len(graph.layers) - 1
    out = {}
    for kind, (start, end) in (("embedding", (0, 1)), ("head", (last, last + 1))):
        cost = {bw: stage_cost(graph, start, end, gpu(), tp, 1, "none", precision="fp32",
                               sequence_parallel=sp, intra_node_gb_per_s=bw,
                               profiles=ProfileSet(), framework=fw)
                for bw in (_SLOW, _FAST)}
        out[kind] = (cost[_SLOW].fwd_s - cost[_FAST].fwd_s,
                     cost[_SLOW].bwd_s - cost[_FAST].bwd_s)
    return out


def test_torchtitan_sp_prices_the_collectives_its_tp_plan_runs() -> None:
    # Measured: the embedding reduce-scatters its partial lookups forward and all-gathers
    # their gradient backward; the head all-gathers its input forward (and the loss's three
    # per-token all-reduces), reduce-scatters the input's gradient backward. Before: an
    # all-reduce in the embedding's forward and one in the head's backward, as without SP.
    tp = 2
    spec = load_model_spec("tiny-llama")
    runs = run_local(_torchtitan_worker, 1, tp)[0]
    sh = spec.seq_len * spec.hidden_size
    assert runs == {"embedding": ([("rs", sh)], [("ag", sh)]),
                    "head": ([("ag", sh)] + [("ar", spec.seq_len)] * 3, [("rs", sh)])}
    priced = _priced_deltas("tiny-llama", TORCHTITAN, tp)
    for kind, (fwd, bwd) in runs.items():
        assert priced[kind][0] == pytest.approx(_delta(fwd, tp), rel=1e-9, abs=1e-15), kind
        assert priced[kind][1] == pytest.approx(_delta(bwd, tp), rel=1e-9, abs=1e-15), kind


@pytest.mark.parametrize("tp", [2, 4])
def test_megatron_sp_prices_its_embedding_and_output_layer_collectives(tp: int) -> None:
    # Megatron-Core's code (module docstring): embedding forward reduce-scatter, backward
    # all-gather; output layer forward all-gather (+ the cross-entropy's three per-token
    # all-reduces), backward all-gather of the saved sequence-split input again for the
    # weight gradient and reduce-scatter of the input's gradient. With a learned position
    # table (GPT: tiny) the embedding all-reduces forward and splits locally, whose backward
    # all-gathers. TP overlap off: every collective shows.
    fw = dataclasses.replace(MEGATRON_CORE, tp_comm_overlap=False)
    for name in ("tiny-llama", "tiny"):
        spec = load_model_spec(name)
        sh, s = spec.seq_len * spec.hidden_size, spec.seq_len
        emb_fwd = [("ar" if name == "tiny" else "rs", sh)]
        expected = {"embedding": (emb_fwd, [("ag", sh)]),
                    "head": ([("ag", sh)] + [("ar", s)] * 3, [("ag", sh), ("rs", sh)])}
        priced = _priced_deltas(name, fw, tp)
        for kind, (fwd, bwd) in expected.items():
            assert priced[kind][0] == pytest.approx(_delta(fwd, tp), rel=1e-9), (name, kind)
            assert priced[kind][1] == pytest.approx(_delta(bwd, tp), rel=1e-9), (name, kind)


def test_megatron_output_layer_forward_collectives_are_not_hidden_by_tp_overlap() -> None:
    # Megatron's output layer is its own ColumnParallelLinear, not a Transformer Engine module
    # ("tp_comm_buffer_name ... not used in non-Transformer-Engine modules"): its SP
    # all-gather runs synchronously before the GEMM and the loss's all-reduces after it, so
    # `tp_comm_overlap` hides none of the head's forward collectives.
    tp = 2
    spec = load_model_spec("tiny-llama")
    sh = spec.seq_len * spec.hidden_size
    fwd = _priced_deltas("tiny-llama", MEGATRON_CORE, tp)["head"][0]
    assert fwd == pytest.approx(_delta([("ag", sh)] + [("ar", spec.seq_len)] * 3, tp),
                                rel=1e-9)


def test_hetplan_runtime_prices_its_whole_sequence_embedding_and_head_the_same_under_sp() -> None:
    # hetplan's runtime slices the sequence at the start of a stage's SP blocks and gathers it
    # at their end (runtime/seqpar.py; priced as `sp_edge_s`), so its embedding and head run
    # on the whole sequence with the collectives they run without SP.
    for name in ("tiny-llama", "tiny"):
        with_sp = _priced_deltas(name, HETPLAN_RUNTIME, 2, sp=True)
        without = _priced_deltas(name, HETPLAN_RUNTIME, 2, sp=False)
        for kind, passes in without.items():
            assert with_sp[kind] == pytest.approx(passes, rel=1e-9), (name, kind)
