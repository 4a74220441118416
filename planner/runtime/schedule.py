"""Pipeline schedules as per-rank action lists, and a check that they cannot deadlock.

An action is (kind, v, m): kind "F" or "B", v the rank's local chunk (global chunk s + v·S),
m the micro-batch within the pipeline. Sends are asynchronous and receives block, so a set of
lists runs to completion exactly when the dependency simulation in `check_deadlock_free` does.
"""

from __future__ import annotations

from typing import Literal

from planner.simulate.order import device_ops

__all__ = ["Action", "actions_for", "check_deadlock_free", "pipeline_actions"]

Action = tuple[Literal["F", "B"], int, int]


def actions_for(schedule: str, group: int, num_groups: int, virtual: int, microbatches: int,
                warmup_extra: int = 0) -> list[Action]:
    """The action list of device group `group` (0-based) of a pipeline: the simulator's order
    (`planner.simulate.order.device_ops`, one generator for both) as runtime actions."""
    if schedule not in ("gpipe", "1f1b", "interleaved") or (
            virtual > 1 and schedule != "interleaved"):
        raise ValueError(f"schedule {schedule!r} with {virtual} virtual stages is not supported")
    ops = device_ops(group, num_groups, virtual, microbatches, schedule, warmup_extra)
    return [("B" if backward else "F", chunk // num_groups, m) for backward, m, chunk in ops]


def check_deadlock_free(lists: list[list[Action]], virtual: int) -> bool:
    """Simulate one pipeline (lists[s] for device group s); True when every action can run.

    F of global chunk c needs F of chunk c-1 for that micro-batch; B of chunk c needs its
    own F and B of chunk c+1. Chunk c lives on group c % S as local chunk c // S.
    """
    groups = len(lists)
    last = groups * virtual - 1
    done: set[tuple[str, int, int]] = set()
    pos = [0] * groups
    progressed = True
    while progressed:
        progressed = False
        for s in range(groups):
            while pos[s] < len(lists[s]):
                kind, v, m = lists[s][pos[s]]
                c = s + v * groups
                if kind == "F":
                    needs = [("F", c - 1, m)] if c > 0 else []
                else:
                    needs = [("F", c, m)] + ([("B", c + 1, m)] if c < last else [])
                if any(n not in done for n in needs):
                    break
                done.add((kind, c, m))
                pos[s] += 1
                progressed = True
    return all(pos[s] == len(lists[s]) for s in range(groups))


def pipeline_actions(schedule: str, num_groups: int, virtual: int,
                     microbatches: int) -> list[list[Action]]:
    """Action lists of every device group of one pipeline, checked to run to completion.

    Megatron's warm-up counts assume the micro-batches divide into groups of S; when they do
    not, the warm-up grows until the simulation completes (all-forward-first always does).
    """
    for extra in range(virtual * microbatches + 1):
        lists = [actions_for(schedule, s, num_groups, virtual, microbatches, extra)
                 for s in range(num_groups)]
        if check_deadlock_free(lists, virtual):
            return lists
    raise AssertionError("all-forward-first schedule failed the deadlock check")  # unreachable
