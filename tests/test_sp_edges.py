"""The all-gathers at the edges of a run of sequence-parallel blocks: hetplan's runtime gathers
the sequence after the run (forward) and all-gathers the gradient of its scatter before it
(backward), once per chunk, on top of the blocks' own reduce-scatters and all-gathers.
Counted on the runtime's `ChunkModule` over a fake TP group in ONE worker process (`run_local`
forks it; torch's profiler records the c10d calls), priced against the ring closed form."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from cost_models.profiles import ProfileSet
from planner.costing.framework import FRAMEWORKS
from planner.costing.links import link_of_kind
from planner.costing.stage_cost import layer_cost_table, stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from planner.models import build_element
from planner.runtime.local import run_local
from planner.runtime.stage import ChunkModule, apply_tp
from tests.test_block_activations import fake_tp
from tests.test_cost_fixtures import gpu

_GATHER = "_c10d_functional::all_gather_into_tensor"


def _gathers(run: Any) -> list[int]:
    """Elements of each all-gather `run()` issues."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    sizes = []
    for e in prof.events():
        if e.name == _GATHER:
            n = 1
            for d in e.input_shapes[0]:
                n *= d
            sizes.append(n * 2)  # each of the 2 TP ranks' shards: the gathered elements
    return sizes


def _chunk_worker(rank: int, world: int, store_dir: str, blocks: int,
                  tp: int) -> tuple[list[int], list[int]]:
    """(forward, backward) all-gathers of a chunk of `blocks` tiny-llama blocks under SP."""
    spec = load_model_spec("tiny-llama")
    with fake_tp(tp) as mesh:
        elements = [build_element(spec, 1 + i, device="cpu") for i in range(blocks)]
        assert all(apply_tp(m, mesh, "block", sequence_parallel=True) for m in elements)
        chunk = ChunkModule(elements, frozenset(range(blocks)), mesh)
        x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
        out: dict[str, torch.Tensor] = {}
        fwd = _gathers(lambda: out.update(y=chunk(x)))
        bwd = _gathers(lambda: out["y"].sum().backward())
        return fwd, bwd


def test_each_sp_run_prices_its_edge_all_gathers() -> None:
    # One chunk of one block and one of two: the blocks' own all-gathers scale with the
    # blocks, the edges' do not, so 2 × one − two is the edges alone: one s·h all-gather in
    # each pass. Before: not priced (a stage's time was the sum of its layers' alone).
    tp = 2
    spec = load_model_spec("tiny-llama")
    one = run_local(_chunk_worker, 1, 1, tp)[0]
    two = run_local(_chunk_worker, 1, 2, tp)[0]
    whole = spec.seq_len * spec.hidden_size
    for once, twice in zip(one, two, strict=True):
        edges = list(once) * 2
        for n in twice:
            edges.remove(n)
        assert edges == [whole]
    graph = extract(spec)
    g = gpu()
    link = link_of_kind(g.intra_node_link, g.intra_node_gb_per_s)
    # Ring all-gather of the whole fp32 hidden states (tiny-llama trains in fp32).
    closed = (tp - 1) * link.latency_s + (tp - 1) / tp * 4.0 * whole / link.bytes_per_s

    def cost(start: int, end: int, framework: str = "hetplan") -> Any:
        return stage_cost(graph, start, end, g, tp, 1, "none", precision="fp32",
                          sequence_parallel=True, profiles=ProfileSet(),
                          framework=FRAMEWORKS[framework])

    for fw in ("hetplan", "megatron"):
        apart = (cost(1, 2, fw), cost(2, 3, fw))
        together = cost(1, 3, fw)
        expect = closed if fw == "hetplan" else 0.0  # Megatron keeps the sequence split
        for part in ("fwd_s", "bwd_s"):
            extra = sum(getattr(c, part) for c in apart) - getattr(together, part)
            assert extra == pytest.approx(expect, rel=1e-9, abs=1e-15), (fw, part)
    # A stage of the head (or the embedding) alone runs no SP block: its layer's time alone.
    table = layer_cost_table(graph, g, tp, 1, "none", precision="fp32",
                             sequence_parallel=True, profiles=ProfileSet())
    for i in (0, len(graph.layers) - 1):
        assert cost(i, i + 1).fwd_s == table.fwd_s[i + 1] - table.fwd_s[i]
        assert cost(i, i + 1).bwd_s == table.bwd_s[i + 1] - table.bwd_s[i]


def test_the_search_tables_price_the_edges_as_estimate_does() -> None:
    # The search's time of every layer range [i, j) is the stage's priced time, edges in.
    from planner.search.tables import RECOMPUTE, option_costs
    from tests.test_cost_fixtures import cluster

    graph = extract(load_model_spec("tiny-llama"))
    g = gpu()
    costs = option_costs(graph, cluster(("a", g, 1, 2, 100.0, None)), 0, 2, 1,
                         precision="fp32", sequence_parallel=True, profiles=ProfileSet())
    n = len(graph.layers)
    for r, rc in enumerate(RECOMPUTE):
        for i in range(n):
            for j in range(i + 1, n + 1):
                c = stage_cost(graph, i, j, g, 2, 1, rc, precision="fp32",
                               sequence_parallel=True, profiles=ProfileSet())
                assert costs.time_s[r, i, j] == pytest.approx(c.fwd_s + c.bwd_s, rel=1e-12)
