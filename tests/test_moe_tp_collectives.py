"""`estimate` against the TP collectives hetplan's runtime runs in a mixture-of-experts block:
tiny-moe's MoE block built by `planner.models`, split by the real `stage.apply_tp` (with and
without sequence parallelism), run forward and backward in ONE worker process over a fake TP
process group (forked by `run_local`; collectives move nothing), and every c10d collective
each pass issues read from torch's profiler. The priced time of the block's collectives
(`layer_costs` on a link, less the same on a near-free link) must be those collectives' prices,
message by message."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import planner
from cost_models.catalog import get_gpu
from cost_models.comm import Link, allgather_s, allreduce_s, reduce_scatter_s
from cost_models.profiles import ProfileSet
from planner.costing.framework import HETPLAN_RUNTIME, MEGATRON_CORE
from planner.costing.layer_cost import layer_costs
from planner.graph.load_spec import load_model_spec
from planner.models import build_element
from planner.runtime.local import run_local
from planner.runtime.stage import apply_tp
from tests.test_block_activations import fake_tp

_KINDS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
_PRICE = {"all_reduce": allreduce_s, "all_gather_into_tensor": allgather_s,
          "reduce_scatter_tensor": reduce_scatter_s}
_TP = 2
_LINK = Link(gb_per_s=50.0, latency_s=7e-6)
_FREE = Link(gb_per_s=1e9, latency_s=0.0)


def _collectives(run: Any, tp: int) -> list[tuple[str, int]]:
    """(kind, elements) of each c10d collective `run()` issues: an all-reduce's buffer, an
    all-gather's result (its input is this rank's 1/tp), a reduce-scatter's input."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    out = []
    for e in prof.events():
        ns, _, kind = e.name.partition("::")
        if ns != "_c10d_functional" or kind not in _KINDS:
            continue
        n = 1
        for d in e.input_shapes[0]:
            n *= d
        out.append((kind, n * tp if kind == "all_gather_into_tensor" else n))
    return out


def _worker(rank: int, world: int, store_dir: str, element: int, tp: int,
            sp: bool, name: str = "tiny-moe") -> tuple[list[tuple[str, int]],
                                                       list[tuple[str, int]]]:
    """The c10d collectives of chain element `element` of `name` under TP (SP optional),
    forward and backward."""
    spec = load_model_spec(name)
    torch.manual_seed(0)
    block = build_element(spec, element, device="cpu")
    with fake_tp(tp) as mesh:
        assert apply_tp(block, mesh, "block", sp) == sp
        rows = spec.seq_len // tp if sp else spec.seq_len  # SP: this rank's sequence slice
        x = torch.randn(1, rows, spec.hidden_size, requires_grad=True)
        out: dict[str, torch.Tensor] = {}
        fwd = _collectives(lambda: out.update(y=block(x)), tp)
        bwd = _collectives(lambda: out["y"].sum().backward(), tp)
        return fwd, bwd


@pytest.fixture(scope="module")
def graph():
    return planner.load_model("tiny-moe").graph


def _comm_s(layer, graph, fw, sp: bool, link: Link) -> tuple[float, float]:
    def run(lk: Link) -> tuple[float, ...]:
        return layer_costs(layer, graph, get_gpu("A100-SXM4-80GB"), _TP, 1, "none", "fp32", sp,
                           lk, ProfileSet(), fw)[:2]

    (f, b), (f0, b0) = run(link), run(_FREE)
    return f - f0, b - b0


def _priced(counted: list[tuple[str, int]], dtype_bytes: int) -> float:
    return sum(_PRICE[k](n * dtype_bytes, _TP, _LINK) - _PRICE[k](n * dtype_bytes, _TP, _FREE)
               for k, n in counted)


@pytest.mark.parametrize("sp", [False, True])
def test_an_moe_block_prices_the_collectives_the_runtime_runs(graph, sp: bool) -> None:
    # Forward: o, each expert's w2 over its routed rows and the shared expert's w2 all-reduce
    # (SP: attention's and the branch's inputs all-gathered, o reduce-scattered). Backward:
    # attention's summed q/k/v input gradient all-reduces once (SP: reduce-scatters), each
    # expert's w1 and w3 and the shared expert's w1 and w3 all-reduce their input gradients
    # (SP: two all-gathers more). Before q, k, v shared one input: three s·h all-reduces
    # backward, not one. Before: two s·h all-reduces each way (with
    # SP one all-gather more): tiny-moe fp32 TP 2 at 50 GB/s, 7 µs, forward 28.3 µs priced vs
    # 84.7 µs counted, backward 28.3 vs 183.5 (SP: 35.4 vs 91.7 and 35.4 vs 197.6).
    index = next(i for i, layer in enumerate(graph.layers) if layer.num_experts)
    layer = graph.layers[index]
    fwd, bwd = run_local(_worker, 1, index, _TP, sp)[0]
    spec = load_model_spec("tiny-moe")
    # The routed rows are s·k·h in all, whatever the (unbalanced) routing on random input.
    routed = spec.seq_len * spec.num_experts_per_tok * spec.hidden_size
    whole = spec.seq_len * spec.hidden_size
    assert sum(n for k, n in fwd if k == "all_reduce" and n != whole) == routed
    assert sum(n for k, n in bwd if k == "all_reduce" and n != whole) == 2 * routed
    priced = _comm_s(layer, graph, HETPLAN_RUNTIME, sp, _LINK)
    # At TP 2 a ring all-reduce is linear in bytes (and beats the tree), so the counted
    # unbalanced rows price the same as the estimate's balanced ones.
    assert priced[0] == pytest.approx(_priced(fwd, graph.dtype_bytes), rel=1e-9)
    assert priced[1] == pytest.approx(_priced(bwd, graph.dtype_bytes), rel=1e-9)


def test_dense_blocks_and_other_frameworks_keep_their_pricing(graph) -> None:
    dense = next(layer for layer in graph.layers if layer.kind == "block" and not
                 layer.num_experts)
    moe = next(layer for layer in graph.layers if layer.num_experts)
    other = dataclasses.replace(HETPLAN_RUNTIME, moe_tp_allreduce_per_expert=False)
    for sp in (False, True):
        assert (_comm_s(dense, graph, HETPLAN_RUNTIME, sp, _LINK)
                == _comm_s(dense, graph, other, sp, _LINK))
        # Megatron-Core's MoE keeps the dense two all-reduces' volume each way.
        assert (_comm_s(moe, graph, MEGATRON_CORE, sp, _LINK)
                == _comm_s(moe, graph, dataclasses.replace(MEGATRON_CORE, name="m"), sp,
                           _LINK))
        two = 2 * allreduce_s(moe.tp_allreduce_bytes, _TP, _LINK)
        two_free = 2 * allreduce_s(moe.tp_allreduce_bytes, _TP, _FREE)
        assert _comm_s(moe, graph, other, sp, _LINK) == pytest.approx((two - two_free,) * 2)
