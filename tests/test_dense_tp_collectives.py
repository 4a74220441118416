"""`estimate` against the TP collectives hetplan's runtime runs in a dense block: a block of
tiny-llama (SwiGLU, grouped-query attention) and of tiny (GPT-2: GELU MLP, biases) built by
`planner.models`, split by the real `stage.apply_tp` (with and without sequence parallelism),
run forward and backward in ONE worker process over a fake TP group (forked by `run_local`;
collectives move nothing), each pass's c10d collectives read from torch's profiler (as in
test_moe_tp_collectives.py). The cost model prices Megatron's two s·h all-reduces each way
per block (fused QKV and gate/up); the runtime must run that many, not one input-gradient
all-reduce per column-parallel linear (q, k, v, w1, w3), and the price must be theirs."""

from __future__ import annotations

from collections import Counter

import pytest

import planner
from planner.costing.framework import HETPLAN_RUNTIME
from planner.graph.load_spec import load_model_spec
from planner.runtime.local import run_local
from tests.test_moe_tp_collectives import _LINK, _TP, _priced, _worker
from tests.test_moe_tp_collectives import _comm_s as layer_comm_s


def _comm_s(name: str, sp: bool) -> tuple[float, float]:
    graph = planner.load_model(name).graph
    layer = next(layer for layer in graph.layers if layer.kind == "block")
    return layer_comm_s(layer, graph, HETPLAN_RUNTIME, sp, _LINK)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny"])
@pytest.mark.parametrize("sp", [False, True])
def test_a_dense_block_runs_the_two_collectives_each_way_it_is_priced_for(name: str,
                                                                          sp: bool) -> None:
    # Before (each column-parallel linear all-reducing its own input gradient), tiny-llama
    # backward ran 5 s·h all-reduces (q, k, v, w1, w3; with SP 5 all-reduces + 2 all-gathers)
    # and tiny 4 (q, k, v, fc1), against 2 priced: fp32 TP 2 at 50 GB/s, 7 µs, 28.3 µs
    # priced vs 70.8 µs (tiny-llama) and 56.6 µs (tiny) counted.
    fwd, bwd = run_local(_worker, 1, 1, _TP, sp, name)[0]  # element 1: the first block
    spec = load_model_spec(name)
    whole = spec.seq_len * spec.hidden_size
    if sp:  # Megatron-SP: gather each branch's input, reduce-scatter its output; backward
        # the same two of each, transposed
        each_way = Counter({("all_gather_into_tensor", whole): 2,
                            ("reduce_scatter_tensor", whole): 2})
    else:
        each_way = Counter({("all_reduce", whole): 2})
    assert Counter(fwd) == each_way
    assert Counter(bwd) == each_way
    dtype_bytes = planner.load_model(name).graph.dtype_bytes
    priced = _comm_s(name, sp)
    # At TP 2 an all-gather plus a reduce-scatter cost what one ring all-reduce does.
    assert priced[0] == pytest.approx(_priced(fwd, dtype_bytes), rel=1e-9)
    assert priced[1] == pytest.approx(_priced(bwd, dtype_bytes), rel=1e-9)
