"""Cross-pipeline rules of a plan (`planner.schema`): expert-parallel groups, context-parallel
blocks, and shard fractions. Each raises ValueError, which pydantic turns into a field error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.schema import Pipeline, Plan, Stage

__all__ = ["check_context_groups", "check_expert_groups", "check_fractions",
           "resolve_zero_alias", "zero1_note", "zero_stage_of"]


def _ep_shape(st: Stage) -> tuple[Any, ...]:
    return (st.layers, st.tp, st.ep, st.recompute)


def check_expert_groups(plan: Plan) -> None:
    """A stage with ep > 1 runs in lockstep with the same stage of its ep-block's pipelines:
    same layers, TP, ep, recompute, stage count and micro-batches (else all-to-alls hang)."""
    n_pipes = len(plan.pipelines)
    for p_idx, pipe in enumerate(plan.pipelines):
        for s_idx, st in enumerate(pipe.stages):
            ep = st.ep or 1
            if ep == 1:
                continue
            where = f"pipelines.{p_idx}.stages.{s_idx}"
            first = p_idx // ep * ep
            if first + ep > n_pipes:
                raise ValueError(f"{where}: ep {ep} needs pipelines {first}..{first + ep - 1} "
                                 f"but the plan has {n_pipes}; use an ep that divides the "
                                 "number of pipelines")
            for q in range(first, first + ep):
                other = plan.pipelines[q]
                same = (len(other.stages) == len(pipe.stages)
                        and other.microbatches == pipe.microbatches
                        and _ep_shape(other.stages[s_idx]) == _ep_shape(st))
                if not same:
                    raise ValueError(f"{where}: ep {ep} groups it with pipeline {q}, whose "
                                     f"stage {s_idx} or micro-batches differ; expert-parallel "
                                     "pipelines need identical stages and micro-batch counts")


def _cp_shape(pipe: Pipeline) -> tuple[Any, ...]:
    return (pipe.microbatches, tuple((st.layers, st.tp, st.cp, st.recompute)
                                     for st in pipe.stages))


def check_context_groups(plan: Plan) -> None:
    """A pipeline's stages share one cp; a cp-block's pipelines run in lockstep on the same
    samples: identical stages (layers, TP, recompute) and micro-batch counts."""
    n_pipes = len(plan.pipelines)
    for p_idx, pipe in enumerate(plan.pipelines):
        cp = pipe.stages[0].cp or 1
        where = f"pipelines.{p_idx}"
        for s_idx, st in enumerate(pipe.stages):
            if (st.cp or 1) != cp:
                raise ValueError(f"{where}.stages.{s_idx}: cp {st.cp or 1} but stage 0 has cp "
                                 f"{cp}; every stage of a pipeline splits the sequence the "
                                 "same way")
        if cp == 1:
            continue
        first = p_idx // cp * cp
        if first + cp > n_pipes:
            raise ValueError(f"{where}: cp {cp} needs pipelines {first}..{first + cp - 1} but "
                             f"the plan has {n_pipes}; use a cp that divides the number of "
                             "pipelines")
        if _cp_shape(plan.pipelines[first]) != _cp_shape(pipe):
            raise ValueError(f"{where}: cp {cp} groups it with pipeline {first}, whose stages "
                             "or micro-batches differ; context-parallel pipelines need "
                             "identical stages and micro-batch counts")


def check_fractions(plan: Plan) -> None:
    fractions = [p.shard_fraction for p in plan.pipelines]
    given = [f for f in fractions if f is not None]
    if not given:
        return
    if len(given) != len(fractions):
        missing = next(i for i, f in enumerate(fractions) if f is None)
        raise ValueError(f"pipelines.{missing}: shard_fraction missing; give it on every "
                         "pipeline or on none")
    if plan.zero_stage == 0:
        raise ValueError("shard_fraction needs ZeRO (zero >= 1): without it nothing is sharded")
    if abs(sum(given) - 1.0) > 1e-6:
        shown = " + ".join(f"{f:g}" for f in given)
        raise ValueError(f"shard_fraction {shown} = {sum(given):.6g}, must sum to 1")


def zero_stage_of(zero: int, zero1: bool) -> int:
    """The ZeRO stage that `zero` and the older `zero1` mean together: the larger one (`zero1`
    true asks for at least stage 1). The one rule for plan files, `megatron_plan` and the
    `--zero1` flag; older writers put `"zero1": true, "zero": 0` in every sharded plan."""
    return max(zero, int(zero1))


def _folded(data: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """`data` without `zero1`, its `zero` set by `zero_stage_of`, and that stage (None where
    `zero` is not a stage 0-3: left in place for the field's own check to refuse)."""
    out = dict(data)
    zero1 = out.pop("zero1")
    if not isinstance(zero1, bool):
        raise ValueError(f"zero1: {zero1!r:.40} is not true or false; delete \"zero1\" and "
                         "give the ZeRO stage as \"zero\": 0, 1, 2 or 3")
    zero = out.get("zero", 0)
    if type(zero) is not int or not 0 <= zero <= 3:
        return out, None
    out["zero"] = zero_stage_of(zero, zero1)
    return out, out["zero"]


def resolve_zero_alias(data: dict[str, Any]) -> dict[str, Any]:
    """Fold an older plan file's `zero1` into `zero` (the one field written since), read as
    the old `zero_stage` did: stage max(zero, zero1)."""
    return _folded(data)[0] if "zero1" in data else data


def zero1_note(data: Any, where: str) -> str | None:
    """The one-line note for a file that still spells its stage with `zero1` (None if not)."""
    if not isinstance(data, dict) or "zero1" not in data:
        return None
    stage = _folded(data)[1]
    return (f"note: {where}: \"zero1\" is the older spelling; read as ZeRO stage {stage} — "
            f"write \"zero\": {stage} and delete \"zero1\"")
