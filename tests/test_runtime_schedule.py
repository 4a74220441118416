"""Schedules (action lists) and the plan → rank topology, without starting processes."""

from __future__ import annotations

import pytest

from planner.errors import HetplanError
from planner.runtime.schedule import actions_for, check_deadlock_free, pipeline_actions
from planner.runtime.topology import (
    backward_peers,
    chunk,
    element_holders,
    forward_peers,
    rank_view,
    torch_rank_map,
)
from tests.test_runtime_plans import make_plan, stage


def _in_flight(actions: list[tuple[str, int, int]]) -> int:
    """Most micro-batches whose forward ran and backward did not, at any point."""
    live, worst = 0, 0
    for kind, _, _ in actions:
        live += 1 if kind == "F" else -1
        worst = max(worst, live)
    return worst


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,micro", [(1, 1), (2, 2), (3, 5), (4, 8), (5, 7)])
def test_every_action_once_and_no_deadlock(schedule: str, stages: int, micro: int) -> None:
    lists = pipeline_actions(schedule, stages, 1, micro)
    for actions in lists:
        assert sorted(actions) == sorted((k, 0, m) for k in "FB" for m in range(micro))
    assert check_deadlock_free(lists, 1)


@pytest.mark.parametrize("stages,micro", [(2, 4), (3, 5), (4, 8), (4, 9)])
def test_1f1b_in_flight_matches_the_textbook_bound(stages: int, micro: int) -> None:
    # Narayanan et al. (PipeDream-Flush / 1F1B): stage s of S keeps at most S − s micro-batches'
    # activations; GPipe keeps all M.
    for s, actions in enumerate(pipeline_actions("1f1b", stages, 1, micro)):
        assert _in_flight(actions) == min(stages - s, micro)
    for actions in pipeline_actions("gpipe", stages, 1, micro):
        assert _in_flight(actions) == micro


@pytest.mark.parametrize("stages,virtual,micro", [(2, 2, 4), (2, 2, 3), (4, 2, 8), (4, 3, 5),
                                                  (5, 2, 7), (3, 3, 6)])
def test_interleaved_runs_to_completion(stages: int, virtual: int, micro: int) -> None:
    lists = pipeline_actions("interleaved", stages, virtual, micro)
    assert check_deadlock_free(lists, virtual)
    for actions in lists:
        assert sorted(actions) == sorted((k, v, m) for k in "FB" for v in range(virtual)
                                         for m in range(micro))


def test_interleaved_follows_megatron_order_when_microbatches_divide() -> None:
    # Megatron-LM's interleaved schedule, S=2, V=2, M=4, first device group: warm-up
    # (S−s−1)·2 + (V−1)·S = 4 forwards in order chunk0 mb0,1; chunk1 mb0,1; then 1F1B.
    acts = actions_for("interleaved", 0, 2, 2, 4)
    assert acts[:4] == [("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("F", 1, 1)]
    assert acts[4:6] == [("F", 0, 2), ("B", 1, 0)]


def test_deadlock_check_catches_a_bad_order() -> None:
    # Stage 0 waits for mb 0's gradient before sending mb 1, which stage 1 needs before it
    # sends that gradient: a cycle.
    bad = [[("F", 0, 0), ("B", 0, 0), ("F", 0, 1), ("B", 0, 1)],
           [("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)]]
    assert not check_deadlock_free(bad, 1)
    # A backward before its own forward cannot run either.
    assert not check_deadlock_free([[("B", 0, 0), ("F", 0, 0)]], 1)


def test_rank_view_and_mixed_tp_peers() -> None:
    plan = make_plan([{"microbatches": 3, "stages": [stage(0, 2, [0]), stage(2, 6, [1, 2])]},
                      {"microbatches": 1, "stages": [stage(0, 6, [3])]}])
    v = rank_view(plan, 2)
    assert (v.pipeline, v.group, v.tp_index, v.microbatches, v.microbatch_offset) == (0, 1, 1, 3, 0)
    assert rank_view(plan, 3).microbatch_offset == 3
    a, b = chunk(plan, 0, 0), chunk(plan, 0, 1)
    # TP 1 → TP 2: rank 0 feeds both TP ranks; each takes its gradient back... from TP rank 0.
    assert forward_peers(a, b, 0) == (1, 2)
    assert forward_peers(a, b, 2) == (0,)
    assert backward_peers(a, b, 0) == (1,)
    assert backward_peers(a, b, 1) == (0,)
    assert backward_peers(a, b, 2) == ()
    assert element_holders(plan, 0) == ((0,), (3,))
    assert element_holders(plan, 4) == ((1, 2), (3,))
    with pytest.raises(HetplanError, match="rank 9"):
        rank_view(plan, 9)


def test_torch_rank_map_follows_torchrun_numbering() -> None:
    # Node x (2 GPUs) holds plan ranks 0 and 2, node y (1 GPU) holds rank 1. torchrun numbers
    # node x first (lowest plan rank), so torch ranks are x:0,1 then y:2.
    plan = make_plan([{"microbatches": 3, "stages": [stage(0, 3, [0]), stage(3, 4, [1]),
                                                      stage(4, 6, [2])]}],
                     nodes={0: ("x", 0), 1: ("y", 0), 2: ("x", 1)})
    assert torch_rank_map(plan) == {0: 0, 2: 1, 1: 2}
    bad = make_plan([{"microbatches": 2, "stages": [stage(0, 3, [0]), stage(3, 6, [1])]}],
                    nodes={0: ("x", 0), 1: ("y", 3)})
    with pytest.raises(HetplanError, match="local_rank 3 on node y"):
        torch_rank_map(bad)


@pytest.mark.parametrize("schedule,stages,virtual,micro", [
    ("gpipe", 3, 1, 5), ("1f1b", 4, 1, 8), ("1f1b", 3, 1, 2), ("interleaved", 2, 2, 4),
    ("interleaved", 4, 2, 8), ("interleaved", 3, 3, 6)])
def test_runtime_runs_the_order_the_simulator_prices(schedule: str, stages: int, virtual: int,
                                                     micro: int) -> None:
    """One generator: the runtime's action lists are the simulator's per-device ops."""
    from planner.simulate import device_orders

    orders = device_orders(stages, virtual, micro, schedule)
    lists = pipeline_actions(schedule, stages, virtual, micro)
    for s, (ops, actions) in enumerate(zip(orders, lists, strict=True)):
        assert [("B" if b else "F", c // stages, m) for b, m, c in ops] == actions, s
        assert all(c % stages == s for _, _, c in ops)
