"""The expert-parallel all-to-all bytes `estimate` prices against what hetplan's runtime sends:
tiny-moe's first MoE block built by `planner.models`, its experts split over an ep-group of 2
by the real `ExpertParallel` / `drop_remote_experts` and over TP by the real `apply_tp` (with
and without sequence parallelism), run forward and backward on gloo in tp·ep spawned workers;
every `all_to_all_single` of rows is counted. Each TP rank holds the whole sequence, so each
dispatches all s·k routed copies: priced per TP rank before as s·k·h/tp (Megatron's
dispatcher), which hetplan's runtime does not run."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import planner
from cost_models.catalog import get_gpu
from cost_models.comm import alltoall_s
from cost_models.profiles import ProfileSet
from planner.costing.framework import HETPLAN_RUNTIME, MEGATRON_CORE
from planner.costing.layer_cost import layer_costs
from planner.costing.moe_a2a import moe_a2a_bytes, routed_load_factor
from planner.graph.load_spec import load_model_spec
from planner.runtime.local import init_world, run_local
from tests.test_moe_tp_collectives import _FREE, _LINK, _collectives, _priced

_EP = 2


def _worker(rank: int, world: int, store_dir: str, element: int, tp: int,
            sp: bool) -> tuple[list[int], list[int], list[Any], list[Any]]:
    import torch.distributed as dist

    from planner.models import build_element
    from planner.runtime.experts import ExpertParallel, drop_remote_experts
    from planner.runtime.stage import apply_tp

    torch.set_num_threads(1)
    init_world(store_dir, "a2a", rank, world)
    ep = world // tp
    pipe, t = divmod(rank, tp)  # TP groups are consecutive ranks, ep-groups one per TP index
    tp_groups = [dist.new_group([q * tp + i for i in range(tp)]) for q in range(ep)]
    ep_groups = [dist.new_group([q * tp + i for q in range(ep)]) for i in range(tp)]
    spec = load_model_spec("tiny-moe")
    torch.manual_seed(0)
    block = build_element(spec, element, device="cpu")
    block.mlp.dispatch = ExpertParallel(ep_groups[t], ep)
    drop_remote_experts(block.mlp, block.mlp.dispatch.index, ep)
    if tp > 1:  # the engine's order: experts dropped, then the block split over TP
        from torch.distributed.device_mesh import DeviceMesh

        assert apply_tp(block, DeviceMesh.from_group(tp_groups[pipe], "cpu"), "block", sp) == sp
    rows: list[int] = []  # bytes of the row buffer each all-to-all sends from this rank
    real = dist.all_to_all_single

    def counted(out: torch.Tensor, inp: torch.Tensor, *args: Any, **kw: Any) -> Any:
        if inp.dim() == 2:  # not the 1-D exchange of per-expert counts
            rows.append(inp.numel() * inp.element_size())
        return real(out, inp, *args, **kw)

    dist.all_to_all_single = counted
    x = torch.randn(1, spec.seq_len, spec.hidden_size,
                    generator=torch.Generator().manual_seed(pipe))  # one sequence per replica
    if sp:
        x = x.chunk(tp, dim=1)[t].contiguous()  # SP: this TP rank's sequence slice
    out: dict[str, torch.Tensor] = {}
    # The TP collectives each pass runs, read from torch's profiler as in
    # test_moe_tp_collectives.py (there over a fake group at ep 1; here over gloo at ep 2).
    fwd_tp = _collectives(lambda: out.update(y=block(x.requires_grad_())), tp)
    fwd = list(rows)
    rows.clear()
    bwd_tp = _collectives(lambda: out["y"].pow(2).sum().backward(), tp)
    return fwd, list(rows), fwd_tp, bwd_tp


@pytest.fixture(scope="module")
def graph():
    return planner.load_model("tiny-moe").graph


def _a2a_priced_s(layer, graph, tp: int, sp: bool, fw) -> float:
    """The forward all-to-all seconds `layer_costs` prices at ep 2, capacity factor 1 (the
    balanced load the counted dispatch buffers are): on _LINK less on a near-free link."""
    def fwd(link) -> float:
        return layer_costs(layer, graph, get_gpu("A100-SXM4-80GB"), tp, 1, "none", "fp32", sp,
                           _LINK, ProfileSet(), fw, moe=(_EP, link, 1.0))[0]

    return fwd(_LINK) - fwd(_FREE)


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, False), (2, True)])
def test_all_to_all_bytes_priced_are_those_the_runtime_sends(graph, tp: int, sp: bool) -> None:
    # Before: tiny-moe fp32 at tp 2, ep 2 sends 16,384 B per all-to-all per rank (SP or not)
    # and was priced 8,192 B (10,240 B at the default capacity factor 1.25); at tp 1 both
    # 16,384 B. At 50 GB/s, 7 µs the forward's two: 14.33 µs counted, 14.16 µs priced.
    index = next(i for i, layer in enumerate(graph.layers) if layer.num_experts)
    layer = graph.layers[index]
    results = run_local(_worker, tp * _EP, index, tp, sp)
    spec = load_model_spec("tiny-moe")
    routed = spec.seq_len * spec.num_experts_per_tok * spec.hidden_size * graph.dtype_bytes
    priced = moe_a2a_bytes(layer, 1, tp, _EP, 1.0, HETPLAN_RUNTIME)
    assert priced == routed  # independent: s·k·h of fp32 from the spec
    for fwd, bwd, _, _ in results:
        assert len(fwd) == len(bwd) == 2  # dispatch and combine, each mirrored backward
        # A rank's dispatch sends all its routed copies, however the router spread them; the
        # backward's mirrored combine sends their gradients.
        assert fwd[0] == bwd[0] == priced
    # What a rank gets back (and sends in the combine) follows the routing; over an ep-group
    # it is what the group dispatched.
    for t in range(tp):
        group = results[t::tp]
        assert sum(r[0][1] for r in group) == sum(r[1][1] for r in group) == _EP * priced
    expected = 2 * (alltoall_s(priced, _EP, _LINK) - alltoall_s(priced, _EP, _FREE))
    assert _a2a_priced_s(layer, graph, tp, sp, HETPLAN_RUNTIME) == pytest.approx(expected,
                                                                                 rel=1e-9)


@pytest.mark.parametrize("sp", [False, True])
def test_per_expert_tp_all_reduces_at_ep_2_are_those_priced(graph, sp: bool) -> None:
    # At ep 2 a TP rank runs its E/ep experts, each once, on the rows it got from the whole
    # ep-group, and all-reduces each expert's w2 output forward and its w1 and w3 input
    # gradients backward (moe_tp_comm.py): E/ep messages forward, 2·E/ep backward, s·k·h of
    # rows per rank on balanced routing; over the ep-group the counted rows are exactly
    # ep·s·k·h, whatever the routing. At TP 2 a ring all-reduce is linear in bytes, so the
    # group's counted messages price what the estimate prices ep times.
    tp = 2
    index = next(i for i, layer in enumerate(graph.layers) if layer.num_experts)
    layer = graph.layers[index]
    results = run_local(_worker, tp * _EP, index, tp, sp)
    spec = load_model_spec("tiny-moe")
    whole = spec.seq_len * spec.hidden_size
    routed = spec.seq_len * spec.num_experts_per_tok * spec.hidden_size
    local = spec.num_experts // _EP

    def expert_rows(colls: list[Any]) -> list[int]:
        return [n for k, n in colls if k == "all_reduce" and n != whole]

    for _, _, fwd_tp, bwd_tp in results:
        assert len(expert_rows(fwd_tp)) == local and len(expert_rows(bwd_tp)) == 2 * local
    assert sum(sum(expert_rows(r[2])) for r in results) == tp * _EP * routed
    assert sum(sum(expert_rows(r[3])) for r in results) == 2 * tp * _EP * routed

    def tp_comm(link) -> tuple[float, float]:
        got = layer_costs(layer, graph, get_gpu("A100-SXM4-80GB"), tp, 1, "none", "fp32", sp,
                          link, ProfileSet(), HETPLAN_RUNTIME, moe=(_EP, None, 1.0))
        return got[0], got[1]

    (f, b), (f0, b0) = tp_comm(_LINK), tp_comm(_FREE)
    group = results[:: tp]  # one TP rank of each replica: each TP group's messages once
    counted_f = sum(_priced(r[2], graph.dtype_bytes) for r in group)
    counted_b = sum(_priced(r[3], graph.dtype_bytes) for r in group)
    assert _EP * (f - f0) == pytest.approx(counted_f, rel=1e-9)
    assert _EP * (b - b0) == pytest.approx(counted_b, rel=1e-9)


def test_megatron_dispatches_a_tp_slice(graph) -> None:
    # Megatron-Core's alltoall dispatcher sends each TP rank's S/TP tokens (token_dispatcher.py).
    layer = next(layer for layer in graph.layers if layer.num_experts)
    for tp in (1, 2, 4):
        ours = moe_a2a_bytes(layer, 3, tp, 4, 1.25, HETPLAN_RUNTIME)  # ep 4 = E: c
        assert ours == pytest.approx(3 * layer.a2a_bytes * 1.25, rel=1e-12)
        assert moe_a2a_bytes(layer, 3, tp, 4, 1.25, MEGATRON_CORE) == ours / tp
        assert moe_a2a_bytes(layer, 3, tp, 1, 1.25, HETPLAN_RUNTIME) == 0.0  # ep 1: none


def _busiest_gpu_load(experts: int, ep: int, capacity: float) -> float:
    """Brute force: expert 0 at `capacity` × the mean, the rest sharing the remainder evenly,
    experts dealt to GPUs in blocks of E/ep (runtime/experts.py); the busiest GPU's rows over
    its balanced share."""
    loads = [capacity] + [(experts - capacity) / (experts - 1)] * (experts - 1)
    per = experts // ep
    return max(sum(loads[g * per:(g + 1) * per]) / per for g in range(ep))


def test_the_busiest_gpus_load_is_the_busiest_experts_spread_over_its_experts() -> None:
    for experts, cf in ((4, 1.25), (8, 1.25), (8, 2.0), (64, 1.5)):
        assert routed_load_factor(1, cf, experts) == 1.0  # dropless ep 1: no imbalance
        assert routed_load_factor(experts, cf, experts) == pytest.approx(cf, rel=1e-12)
        ep = 2
        while ep <= experts:
            assert routed_load_factor(ep, cf, experts) == pytest.approx(
                _busiest_gpu_load(experts, ep, cf), rel=1e-12), (experts, ep)
            ep *= 2


@pytest.mark.parametrize("tp", [1, 2])
def test_capacity_factor_prices_the_busiest_gpus_gemms_and_all_to_all_closed_form(
        graph, monkeypatch: pytest.MonkeyPatch, tp: int) -> None:
    # The busiest GPU's routed load (above) × the balanced one: at ep > 1 its expert GEMMs run
    # (load-1)·fwd_expert_flops more per sequence, split over TP, forward, dgrad and wgrad
    # alike, and its all-to-all buffers are load × s·k·h. At ep 1 (dropless, all experts on
    # every GPU) nothing changes. Before, every ep was charged the busiest expert's full
    # capacity factor (c 1.25: +25 % of the routed experts' FLOPs, ep 1 included).
    import planner.costing.layer_cost as lc

    layer = next(layer for layer in graph.layers if layer.num_experts)
    works: list[Any] = []
    real = lc.layer_compute_s

    def spy(work: Any, *args: Any) -> Any:
        works.append(work)
        return real(work, *args)

    monkeypatch.setattr(lc, "layer_compute_s", spy)
    mb, cf = 3, 1.25

    def cost(ep: int, c: float, link) -> tuple[float, ...]:
        return layer_costs(layer, graph, get_gpu("A100-SXM4-80GB"), tp, mb, "none", "fp32",
                           False, _LINK, ProfileSet(), HETPLAN_RUNTIME, moe=(ep, link, c))

    for ep, link in ((1, None), (2, _FREE), (4, _FREE)):
        even, skew = cost(ep, 1.0, link), cost(ep, cf, link)
        w_even, w_skew = works[-2:]
        load = _busiest_gpu_load(layer.num_experts, ep, cf)
        extra = (load - 1.0) * mb * layer.fwd_expert_flops / tp
        for name in ("fwd_matmul_flops", "bwd_act_matmul_flops", "bwd_weight_matmul_flops"):
            assert getattr(w_skew, name) - getattr(w_even, name) == pytest.approx(
                extra, rel=1e-12, abs=1e-6), (ep, name)
        if ep == 1:
            assert skew[:2] == even[:2]
    # The all-to-all at the busiest GPU's load: on _LINK less the same on a near-free link,
    # the forward's two.
    for c in (1.0, cf):
        nbytes = _busiest_gpu_load(layer.num_experts, _EP, c) * mb * layer.a2a_bytes
        expected = 2 * (alltoall_s(nbytes, _EP, _LINK) - alltoall_s(nbytes, _EP, _FREE))
        assert cost(_EP, c, _LINK)[0] - cost(_EP, c, _FREE)[0] == pytest.approx(
            expected, rel=1e-9)
