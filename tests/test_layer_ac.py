"""torchtitan's layer-level selective checkpointing (`selective_ac_option = "N"`): a stage
fully re-runs the forward of every N-th of its blocks in the backward and keeps only their
inputs; the other blocks are priced as without recompute.

Closed form for a stage of B identical blocks: floor(B / N) checkpointed, so
  backward   = backward without recompute + floor(B / N) · (one block's forward),
  activations = without recompute − floor(B / N) · (a block's saved − its input),
and the recompute transient that of one fully recomputed block (any N <= B). The block
figures come from the same stage priced at `none` and `full` over one block."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cost_models.profiles import ProfileSet
from planner.costing.framework import MEGATRON_CORE, TORCHTITAN
from planner.costing.layer_ac import checkpointed_blocks, with_selective_ac
from planner.costing.stage_cost import stage_cost
from planner.costing.validation.common import graph_for
from planner.errors import HetplanError
from tests.cli import run_cli
from tests.test_cost_fixtures import gpu

_KW = {"precision": "bf16", "profiles": ProfileSet()}


def _layer(every: int) -> object:
    return dataclasses.replace(TORCHTITAN, sac_policy="torchtitan-layer", sac_every=every)


@pytest.mark.parametrize("every", [1, 2, 3, 5, 7])
def test_a_stage_of_identical_blocks_recomputes_every_nth(every: int) -> None:
    g = graph_for("llama3-8b", seq_len=2048, precision="bf16")
    first = next(i for i, x in enumerate(g.layers) if x.kind == "block")
    blocks = 5  # a stage of layers [first, first + 5): five identical blocks
    start, end = first, first + blocks
    one = {m: stage_cost(g, first, first + 1, gpu(), 1, 1, m, framework=TORCHTITAN, **_KW)
           for m in ("none", "full")}
    none = stage_cost(g, start, end, gpu(), 1, 1, "none", framework=TORCHTITAN, **_KW)
    got = stage_cost(g, start, end, gpu(), 1, 1, "selective", framework=_layer(every), **_KW)
    k = blocks // every
    assert got.fwd_s == pytest.approx(none.fwd_s, rel=1e-12)
    assert got.bwd_s == pytest.approx(none.bwd_s + k * one["full"].fwd_s, rel=1e-12)
    assert got.recompute_s == pytest.approx(k * one["full"].fwd_s, rel=1e-12)
    kept = one["none"].activation_bytes_per_microbatch - one["full"].activation_bytes_per_microbatch
    assert got.activation_bytes_per_microbatch == pytest.approx(
        none.activation_bytes_per_microbatch - k * kept, rel=1e-12)
    assert got.recompute_transient_bytes == (one["full"].recompute_transient_bytes if k
                                             else none.recompute_transient_bytes)
    assert got.params_per_gpu == none.params_per_gpu


def test_every_one_is_full_recompute_and_beyond_the_stage_is_none() -> None:
    # N = 1 checkpoints every block (torchtitan: count % 1 == 0); N above the stage's block
    # count none of them: the stage then prices exactly as `full` / `none` do.
    g = graph_for("llama3-8b", seq_len=2048, precision="bf16")
    last = len(g.layers)
    for every, mode in ((1, "full"), (last, "none")):
        got = stage_cost(g, 0, last, gpu(), 2, 1, "selective", framework=_layer(every), **_KW)
        ref = stage_cost(g, 0, last, gpu(), 2, 1, mode, framework=TORCHTITAN, **_KW)
        assert got == ref, (every, mode)


def test_the_count_starts_at_the_stages_first_block() -> None:
    # torchtitan's counter counts blocks only (the embedding and head are not wrapped):
    # layers [0, 6) of llama3-8b are the embedding and blocks 1..5, of which N = 2 picks the
    # 2nd and 4th, layer indices 2 and 4.
    g = graph_for("llama3-8b", seq_len=2048, precision="bf16")
    assert g.layers[0].kind == "embedding"
    assert checkpointed_blocks(g, 0, 6, 2) == [2, 4]
    assert checkpointed_blocks(g, 3, 10, 3) == [5, 8]


def test_only_torchtitan_takes_the_option() -> None:
    assert with_selective_ac(TORCHTITAN, "3", True).sac_every == 3
    assert with_selective_ac(TORCHTITAN, "op", True) == TORCHTITAN
    assert with_selective_ac(MEGATRON_CORE, None, True) is MEGATRON_CORE
    with pytest.raises(HetplanError, match="megatron framework has no such option"):
        with_selective_ac(MEGATRON_CORE, "2", True)
    with pytest.raises(HetplanError, match="selective recompute"):
        with_selective_ac(TORCHTITAN, "2", False)
    for bad in ("0", "-1", "x", "2.5", "²"):
        with pytest.raises(HetplanError, match="block interval"):
            with_selective_ac(TORCHTITAN, bad, True)


_ARGS = ["estimate", "llama3-8b", "dgx-a100", "--tp", "1", "--pp", "1", "--dp", "8",
         "--zero", "3", "--global-batch", "16", "--seq-len", "2048", "--no-profiles", "--json"]


def test_cli_prices_the_layer_option_between_none_and_full(
        capsys: pytest.CaptureFixture[str]) -> None:
    def run(*extra: str) -> dict:
        code, out, err = run_cli([*_ARGS, "--framework", "torchtitan", *extra], capsys)
        assert code == 0, err
        return json.loads(out)

    none, full = run("--recompute", "none"), run("--recompute", "full")
    every = {n: run("--recompute", "selective", "--selective-ac", str(n)) for n in (1, 2, 64)}
    assert every[1]["iteration_time_s"] == full["iteration_time_s"]
    assert every[64]["iteration_time_s"] == none["iteration_time_s"]
    assert none["iteration_time_s"] < every[2]["iteration_time_s"] < full["iteration_time_s"]


def test_cli_refuses_the_option_for_other_frameworks_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli([*_ARGS, "--framework", "megatron", "--recompute", "selective",
                              "--selective-ac", "2"], capsys)
    assert code == 2 and not out
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "torchtitan" in lines[0], err
