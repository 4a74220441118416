"""Local refinement of finished plans, judged by `estimate` alone.

The programs rank pipelines by a closed form (1F1B's Σ t + (m − 1)·max t) and deal each
device's layers evenly into interleaved chunks; the estimate's event simulation can rate a
neighbour of their answer better. So the best plans are improved by first-improvement hill
climbing over moves that keep every rank on its GPU:

- move one boundary between consecutive stages (or interleaved chunks) by one layer, in every
  pipeline of the same shape at once (chunks may end up holding only the embedding or the
  head: uneven chunk boundaries);
- change one stage's recompute mode, in every pipeline of the shape;
- move one micro-batch from one pipeline to another (first pipelines of two shapes, or two
  replicas of one shape);
- halve or double the micro-batch size (every pipeline's count scaled);
- switch 1F1B and GPipe (where both are in the space asked for);
- drop one replica of a shape (its micro-batches go to the others; its GPUs fall idle), which
  a cost objective or budget may prefer;
- merge two adjacent stages onto the first one's GPUs, or halve a stage's TP degree (the
  closed form's tail term can prefer more GPUs than the event simulation does).

Each accepted move strictly improves the rank key (objective, then the total order), so the
walk ends; a fixed count of estimates bounds it, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from planner.schema import Pipeline, Plan, RankInfo
from planner.search.order import plan_key

__all__ = ["moves", "neighbours", "refine"]

_MODES = ("none", "selective", "full")

Judge = Callable[[Plan], tuple[tuple, Any] | None]
"""Plan -> (rank key, estimate), or None when infeasible or outside the space asked for."""


def _rebuild(p: Plan, **update: Any) -> Plan | None:
    """A validated copy (the structure rules run again); None when the copy breaks them."""
    try:
        return Plan.model_validate({**dict(p), "predicted": None, **update})
    except ValueError:
        return None


def _shapes(p: Plan) -> dict[tuple, list[int]]:
    """Pipelines grouped by shape (layers of every stage, devices' GPU type and TP)."""
    out: dict[tuple, list[int]] = {}
    for k, pipe in enumerate(p.pipelines):
        key = tuple((st.layers, st.gpu, st.tp, st.recompute) for st in pipe.stages)
        out.setdefault(key, []).append(k)
    return out


def _with_pipes(p: Plan, members: Sequence[int], change: Callable[[Pipeline], Pipeline | None],
                ) -> Plan | None:
    pipes = list(p.pipelines)
    for k in members:
        new = change(pipes[k])
        if new is None:
            return None
        pipes[k] = new
    return _rebuild(p, pipelines=tuple(pipes))


def _move_boundary(s: int, delta: int) -> Callable[[Pipeline], Pipeline | None]:
    def change(pipe: Pipeline) -> Pipeline | None:
        a, b = pipe.stages[s], pipe.stages[s + 1]
        cut = a.layers[1] + delta
        if not a.layers[0] < cut < b.layers[1]:
            return None
        stages = list(pipe.stages)
        stages[s] = a.model_copy(update={"layers": (a.layers[0], cut)})
        stages[s + 1] = b.model_copy(update={"layers": (cut, b.layers[1])})
        return pipe.model_copy(update={"stages": tuple(stages)})
    return change


def _set_mode(s: int, mode: str) -> Callable[[Pipeline], Pipeline]:
    def change(pipe: Pipeline) -> Pipeline:
        stages = list(pipe.stages)
        stages[s] = stages[s].model_copy(update={"recompute": mode})
        return pipe.model_copy(update={"stages": tuple(stages)})
    return change


def _shift_microbatch(p: Plan, src: int, dst: int) -> Plan | None:
    pipes = list(p.pipelines)
    if pipes[src].microbatches <= 1:
        return None
    pipes[src] = pipes[src].model_copy(update={"microbatches": pipes[src].microbatches - 1})
    pipes[dst] = pipes[dst].model_copy(update={"microbatches": pipes[dst].microbatches + 1})
    return _rebuild(p, pipelines=tuple(pipes))


def _rescale(p: Plan, b: int) -> Plan | None:
    old = p.micro_batch_size
    if b < 1 or p.global_batch_size % b:
        return None
    pipes = []
    for pipe in p.pipelines:
        seqs = pipe.microbatches * old
        if seqs % b:
            return None
        pipes.append(pipe.model_copy(update={"microbatches": seqs // b}))
    return _rebuild(p, micro_batch_size=b, pipelines=tuple(pipes))


def _drop(p: Plan, members: list[int]) -> Plan | None:
    """Drop the last replica of a shape; its micro-batches go to the other replicas in turn,
    its ranks leave the plan and the rest are renumbered in order."""
    if len(members) < 2 or len(p.pipelines) < 2:
        return None
    gone = members[-1]
    extra = p.pipelines[gone].microbatches
    counts = {k: p.pipelines[k].microbatches for k in members[:-1]}
    for r in range(extra):
        counts[members[r % (len(members) - 1)]] += 1
    kept = [k for k in range(len(p.pipelines)) if k != gone]
    used = sorted({r for k in kept for st in p.pipelines[k].stages for r in st.ranks})
    new_id = {r: i for i, r in enumerate(used)}
    info = {r.rank: r for r in p.ranks}
    pipes = []
    for k in kept:
        pipe = p.pipelines[k]
        stages = tuple(st.model_copy(update={"ranks": tuple(new_id[r] for r in st.ranks)})
                       for st in pipe.stages)
        pipes.append(Pipeline(microbatches=counts.get(k, pipe.microbatches), stages=stages))
    ranks = tuple(RankInfo(rank=new_id[r], node=info[r].node, local_rank=info[r].local_rank)
                  for r in used)
    return _rebuild(p, pipelines=tuple(pipes), ranks=ranks, zero=p.zero if len(pipes) > 1 else 0)


def moves(p: Plan, schedules: Sequence[str], sizes: Sequence[int],
          ) -> list[Callable[[], Plan | None]]:
    """Every one-move neighbour of `p` as a thunk, in a fixed order (built only when tried)."""
    shapes = _shapes(p)
    out: list[Callable[[], Plan | None]] = []
    for members in shapes.values():
        stages = p.pipelines[members[0]].stages
        for s in range(len(stages) - 1):
            for delta in (-1, 1):
                out.append(lambda m=members, s=s, d=delta: _with_pipes(p, m, _move_boundary(s, d)))
    for members in shapes.values():
        stages = p.pipelines[members[0]].stages
        for s, st in enumerate(stages):
            for mode in _MODES:
                if mode != st.recompute:
                    out.append(lambda m=members, s=s, mode=mode: _with_pipes(p, m,
                                                                            _set_mode(s, mode)))
    if any((st.cp or 1) > 1 or (st.ep or 1) > 1 for pipe in p.pipelines for st in pipe.stages):
        # cp- and ep-blocks need identical pipelines and micro-batch counts: only the moves
        # above (applied to a whole shape) and the schedule keep them.
        return out + [lambda other=other: _rebuild(p, schedule=other)
                      for other in ("1f1b", "gpipe") if other in schedules
                      and p.schedule in ("1f1b", "gpipe") and other != p.schedule]
    firsts = [m[0] for m in shapes.values()]
    pairs = [(a, b) for a in firsts for b in firsts if a != b]
    pairs += [(m[0], m[-1]) for m in shapes.values() if len(m) > 1]
    pairs += [(m[-1], m[0]) for m in shapes.values() if len(m) > 1]
    out += [lambda a=a, b=b: _shift_microbatch(p, a, b) for a, b in pairs]
    b = p.micro_batch_size
    out += [lambda new=new: _rescale(p, new) for new in (b // 2, 2 * b)
            if new in sizes and new != b]
    for other in ("1f1b", "gpipe"):
        if p.schedule in ("1f1b", "gpipe") and other != p.schedule and other in schedules:
            out.append(lambda other=other: _rebuild(p, schedule=other))
    out += [lambda m=members: _drop(p, m) for members in shapes.values()]
    for members in shapes.values():
        stages = p.pipelines[members[0]].stages
        out += [lambda m=members, s=s: _merge(p, m, s) for s in range(len(stages) - 1)]
        out += [lambda m=members, s=s: _shrink_tp(p, m, s) for s in range(len(stages))
                if stages[s].tp > 1 and s < len(p.device_groups(members[0]))]
    return out


def _renumbered(p: Plan, pipes: list[Pipeline], **update: Any) -> Plan | None:
    """`p` with these pipelines; ranks no stage uses leave, the rest are renumbered in order."""
    used = sorted({r for pipe in pipes for st in pipe.stages for r in st.ranks})
    new_id = {r: i for i, r in enumerate(used)}
    info = {r.rank: r for r in p.ranks}
    pipes = [pipe.model_copy(update={"stages": tuple(
        st.model_copy(update={"ranks": tuple(new_id[r] for r in st.ranks)})
        for st in pipe.stages)}) for pipe in pipes]
    ranks = tuple(RankInfo(rank=new_id[r], node=info[r].node, local_rank=info[r].local_rank)
                  for r in used)
    return _rebuild(p, pipelines=tuple(pipes), ranks=ranks, **update)


def _shrink_tp(p: Plan, members: list[int], s: int) -> Plan | None:
    """Stage s (every chunk on its GPUs) at half its TP degree, in every pipeline of the
    shape; the second half of its ranks leaves the plan."""
    pipes = list(p.pipelines)
    for k in members:
        stages = list(pipes[k].stages)
        home = stages[s].ranks
        if len(home) < 2:
            return None
        keep = home[: len(home) // 2]
        stages = [st.model_copy(update={"tp": len(keep), "ranks": keep})
                  if st.ranks == home else st for st in stages]
        pipes[k] = pipes[k].model_copy(update={"stages": tuple(stages)})
    return _renumbered(p, pipes)


def _merge(p: Plan, members: list[int], s: int) -> Plan | None:
    """Stage s takes over stage s + 1's layers, in every pipeline of the shape (on stage s's
    GPUs); the freed ranks leave the plan. Fewer stages can win on p2p and the bubble."""
    if p.virtual_stages > 1:
        return None
    gone: set[int] = set()
    pipes = list(p.pipelines)
    for k in members:
        stages = list(pipes[k].stages)
        a, b = stages[s], stages[s + 1]
        gone.update(b.ranks)
        stages[s:s + 2] = [a.model_copy(update={"layers": (a.layers[0], b.layers[1])})]
        pipes[k] = pipes[k].model_copy(update={"stages": tuple(stages)})
    return _renumbered(p, pipes)


def neighbours(p: Plan, schedules: Sequence[str], sizes: Sequence[int]) -> Iterator[Plan]:
    """Every one-move neighbour of `p`, in a fixed order (cheap structural moves first)."""
    for move in moves(p, schedules, sizes):
        q = move()
        if q is not None:
            yield q


def refine(start: Plan, start_key: tuple, judge: Judge, schedules: Sequence[str],
           sizes: Sequence[int], max_estimates: int) -> tuple[list[tuple[tuple, Plan, Any]], int]:
    """Hill-climb from `start` (rank key `start_key`); returns every improving plan met (best
    last) with its key and estimate, and the estimates spent.

    After a success the next pass starts at the move that succeeded (a boundary that gained
    by moving one layer often gains by moving the next), so a walk does not re-try every
    earlier move first; a pass that finds nothing ends the walk.
    """
    spent = 0
    current, key = start, start_key
    found: list[tuple[tuple, Plan, Any]] = []
    seen: set[tuple] = set()
    at = 0
    improved = True
    while improved and spent < max_estimates:
        improved = False
        todo = moves(current, schedules, sizes)
        if not todo:
            break
        at %= len(todo)
        for step in range(len(todo)):
            idx = (at + step) % len(todo)
            q = todo[idx]()
            if q is None:
                continue
            sig = plan_key(q)
            if sig in seen:
                continue
            seen.add(sig)
            spent += 1
            judged = judge(q)
            # The last key item is the total order's tie-breaker: a move must gain on the
            # objective itself, or the walk would wander among equals.
            if judged is not None and judged[0][:-1] < key[:-1]:
                key, current, at = judged[0], q, idx
                found.append((key, q, judged[1]))
                improved = True
                break
            if spent >= max_estimates:
                break
    return found, spent
