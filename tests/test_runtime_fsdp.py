"""ZeRO-2/3 in the runtime: torch's fully_shard (FSDP2) over even replicas, the ZeRO-2 slices
cut in proportion to `shard_fraction` where FSDP2 cannot express the shards. Each run is checked
against the one-process reference (gradients every step, weights after the last step)."""

from __future__ import annotations

from typing import Any

import pytest

from planner.runtime.dry_run import shrink_plan
from planner.runtime.fsdp import fsdp_layout
from planner.runtime.zero import _weighted
from planner.schema import Plan
from tests.test_runtime_dist import TOL, _check
from tests.test_runtime_plans import make_plan, stage


def _plan(pipes: list[dict[str, Any]], zero: int, schedule: str = "1f1b",
          virtual: int = 1) -> Plan:
    bare = [{k: v for k, v in p.items() if k != "shard_fraction"} for p in pipes]
    data = make_plan(bare, zero1=True, schedule=schedule, virtual=virtual).to_dict()
    for p, q in zip(data["pipelines"], pipes, strict=True):
        if "shard_fraction" in q:
            p["shard_fraction"] = q["shard_fraction"]
    data["zero"] = zero
    return Plan.from_dict(data)


# Two identical pipelines: TP 2 (ranks 3p, 3p+1) then TP 1; tiny GPT ties embedding and head.
_EVEN = [{"microbatches": 3, "stages": [stage(0, 3, [3 * p, 3 * p + 1]), stage(3, 6, [3 * p + 2])]}
         for p in range(2)]
_UNEVEN = [
    {"microbatches": 3, "shard_fraction": 0.75, "stages": [stage(0, 4, [0]), stage(4, 6, [1])]},
    {"microbatches": 1, "shard_fraction": 0.25, "stages": [stage(0, 2, [2, 3]), stage(2, 6, [4])]},
]


def _elements(n: int, tied: bool) -> dict:
    keys = {(e, "w"): (e,) for e in range(1, n - 1)}
    keys[(0, "w")] = (0, n - 1) if tied else (0,)
    if not tied:
        keys[(n - 1, "w")] = (n - 1,)
    return keys


def test_fsdp_takes_even_replicas_only() -> None:
    # Identical replicas: every element but the tied embedding/head is FSDP2's.
    layout = fsdp_layout(_plan(_EVEN, 3), _elements(6, tied=True))
    assert sorted(layout) == [1, 2, 3, 4]
    assert layout[1] == ((0, 1), (3, 4)) and layout[4] == ((2,), (5,))
    assert sorted(fsdp_layout(_plan(_EVEN, 2), _elements(6, tied=False))) == list(range(6))
    assert fsdp_layout(_plan(_EVEN, 1), _elements(6, tied=False)) == {}  # ZeRO-1: slices
    # Replicas of different shapes, or uneven fractions: FSDP2's even shards cannot.
    assert fsdp_layout(_plan(_UNEVEN, 3), _elements(6, tied=False)) == {}
    even_shapes = [{**p, "shard_fraction": f} for p, f in zip(_EVEN, (0.6, 0.4), strict=True)]
    assert fsdp_layout(_plan(even_shapes, 3), _elements(6, tied=False)) == {}


def test_fsdp_keeps_replicas_on_different_gpu_types_off() -> None:
    # A bf16 A100 replica beside an fp16 V100 one (runtime/precision.py) would each gather in
    # its own 16-bit param_dtype: same-sized bytes read as the other dtype (a reviewer saw
    # weights off by 1.38 at magnitude 0.35). Such groups stay on the slices.
    data = _plan(_EVEN, 3).to_dict()
    assert sorted(fsdp_layout(Plan.from_dict(data), _elements(6, tied=False))) == list(range(6))
    for st in data["pipelines"][1]["stages"]:
        st["gpu"] = "V100-SXM2-32GB"
    mixed = Plan.from_dict(data)
    assert fsdp_layout(mixed, _elements(6, tied=False)) == {}


def test_weighted_pieces_cover_in_proportion() -> None:
    assert _weighted(10, [0.75, 0.25]) == [(0, 8), (8, 10)]
    assert _weighted(7, [1, 1, 1]) == [(0, 2), (2, 5), (5, 7)]
    assert _weighted(1, [0.5, 0.5]) == [(0, 0), (0, 1)]


def test_fsdp_zero3_tp2_and_zero2_match_reference() -> None:
    # ZeRO-3 on a (dp 2, tp 2) mesh with clipping: blocks and the TP-1 stage under FSDP2, the
    # tied embedding/head on ZeRO-2 slices. Then ZeRO-2 (weights gathered once per step) under
    # interleaving, and uneven ZeRO-2 slices (0.75 / 0.25) over pipelines of different shapes.
    res = _check(_plan(_EVEN, 3), "tiny", max_grad_norm=0.1)
    assert res.max_param_diff <= TOL, res
    # tiny-llama (untied): its vocab-split token table under FSDP2 on the (dp, tp) mesh, whose
    # forward hands the lookup a gathered TP DTensor and whose backward gets its rows' gradient.
    res = _check(_plan(_EVEN, 3), "tiny-llama")
    assert res.max_param_diff <= TOL, res
    # Interleaved: device groups (p) and (2 + p), each with two chunks.
    inter = [{"microbatches": 2, "stages": [stage(0, 2, [p]), stage(2, 4, [2 + p]),
                                            stage(4, 5, [p]), stage(5, 6, [2 + p])]}
             for p in range(2)]
    res = _check(_plan(inter,
                       2, schedule="interleaved", virtual=2), "tiny-llama")
    assert res.max_param_diff <= TOL, res
    res = _check(_plan(_UNEVEN, 2), "tiny-llama")
    assert res.max_param_diff <= TOL, res


def test_dryrun_shrink_keeps_the_shard_proportions() -> None:
    # Pipelines 0 and 1 share a shape, so a 3-rank limit keeps pipelines 0 and 2, whose
    # fractions 0.5 and 0.2 become 0.5 / 0.7 and 0.2 / 0.7.
    pipes = [{"microbatches": 1, "shard_fraction": f, "stages": [stage(0, 6, r)]}
             for f, r in ((0.5, [0]), (0.3, [1]), (0.2, [2, 3]))]
    small, _ = shrink_plan(_plan(pipes, 1), max_ranks=3)
    assert [p.shard_fraction for p in small.pipelines] == pytest.approx([0.5 / 0.7, 0.2 / 0.7])
    whole, _ = shrink_plan(_plan(pipes, 1))
    assert [p.shard_fraction for p in whole.pipelines] == pytest.approx([0.5, 0.3, 0.2])
