"""The launch plan (`hetplan.plan/v1`): pipelines of stages, the rank map, predictions.

A plan is plain, validated data. It is self-contained on disk (model and cluster specs
embedded), deterministic (`to_json` of equal plans gives equal bytes), and checked on load:
layers covered once per pipeline, every rank exactly once, TP groups inside one node,
micro-batches adding up to the global batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import SpecError
from planner.input_files import load_json
from planner.limits import (
    MAX_DEGREE,
    MAX_GLOBAL_BATCH,
    MAX_LAYERS,
    MAX_MICROBATCHES,
    limit_text,
)
from planner.outfile import write_output
from planner.schema_groups import (
    check_context_groups,
    check_expert_groups,
    check_fractions,
    resolve_zero_alias,
    zero1_note,
)

__all__ = ["SCHEMA", "Pipeline", "Plan", "RankInfo", "Stage"]

SCHEMA = "hetplan.plan/v1"
Schedule = Literal["1f1b", "gpipe", "interleaved"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stage(_Frozen):
    """One pipeline stage (a model chunk under interleaving) and the TP group that runs it."""

    layers: tuple[int, int]
    """Half-open range [start, end) over the LayerGraph's chain."""
    gpu: str
    """Catalog name of the GPU type the stage's ranks are."""
    tp: int = Field(ge=1, le=MAX_DEGREE)
    ranks: tuple[int, ...]
    """Global ranks of the TP group, TP-rank order; len(ranks) == tp."""
    recompute: Literal["none", "selective", "full"] = "none"
    ep: int | None = Field(default=None, ge=1, le=MAX_DEGREE)
    """Expert parallelism (mixture-of-experts models): this stage's routed experts are split
    over the same stage of `ep` consecutive pipelines (pipelines [k·ep, (k+1)·ep)), which
    exchange tokens by all-to-all. None (written for dense plans) means 1."""
    cp: int | None = Field(default=None, ge=1, le=MAX_DEGREE)
    """Context parallelism: the sequence of each sample is split over the same stage of `cp`
    consecutive pipelines (pipelines [k·cp, (k+1)·cp), a cp-block), which run the same samples,
    each on 2 of 2·cp sequence chunks (zig-zag: chunks i and 2·cp-1-i, so causal attention
    work balances), exchanging keys and values in attention. Every stage of a pipeline has
    the same cp. None (written when 1) means 1."""

    @model_validator(mode="after")
    def _check(self) -> Stage:
        start, end = self.layers
        if not 0 <= start < end:
            raise ValueError(f"layers [{start}, {end}) is empty or negative; need 0 <= start < end")
        if len(self.ranks) != self.tp:
            raise ValueError(f"tp is {self.tp} but {len(self.ranks)} ranks are listed")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"ranks {list(self.ranks)} repeat a rank")
        return self


class Pipeline(_Frozen):
    """One data-parallel replica: a chain of stages and its share of the batch."""

    microbatches: int = Field(ge=1, le=MAX_MICROBATCHES)
    stages: tuple[Stage, ...] = Field(min_length=1, max_length=MAX_LAYERS + 2)
    shard_fraction: float | None = Field(default=None, gt=0, le=1, strict=True)
    """This replica's share of the ZeRO-sharded state of each layer it holds (absent: an even
    1 / pipelines). Decoupled from its batch share (`microbatches`, which follows speed): a GPU's
    shard can follow its memory instead (Cephalo, 2024, heterogeneous FSDP). Given on every
    pipeline or none, summing to 1."""


class RankInfo(_Frozen):
    rank: int = Field(ge=0)
    node: str
    local_rank: int = Field(ge=0)


class Plan(_Frozen):
    """A launch plan. `model`/`cluster` may be None only in memory (API), never on disk."""

    schema_: Literal["hetplan.plan/v1"] = Field(default=SCHEMA, alias="schema")
    model: dict[str, Any] | None = None
    cluster: dict[str, Any] | None = None
    global_batch_size: int = Field(ge=1, le=MAX_GLOBAL_BATCH)
    micro_batch_size: int = Field(ge=1, le=MAX_GLOBAL_BATCH)
    schedule: Schedule = "1f1b"
    virtual_stages: int = Field(default=1, ge=1, le=MAX_LAYERS)
    """Model chunks per device group (interleaved schedule); stages list S × V chunks."""
    sequence_parallel: bool = False
    zero: int = Field(default=0, ge=0, le=3)
    """ZeRO stage over data parallelism: 0 off, 1 shards optimizer state, 2 also gradients, 3
    also weights (FSDP: gathered layer by layer in forward and backward). Older files' `zero1`
    is read as the old writers meant it, stage max(zero, zero1) (`zero_stage_of`); it is never
    written, so a file states its stage once."""
    pipelines: tuple[Pipeline, ...] = Field(min_length=1, max_length=MAX_DEGREE)
    ranks: tuple[RankInfo, ...]
    predicted: dict[str, Any] | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        # pydantic's lax mode would read "2" or true as 2: a plan's counts must be numbers.
        if isinstance(data, dict):
            _check_counts(data)
            data = resolve_zero_alias(data)
        return data

    @model_validator(mode="after")
    def _check(self) -> Plan:
        _check_structure(self)
        return self

    # --- derived views -------------------------------------------------------------------
    @property
    def zero_stage(self) -> int:
        """The ZeRO stage in force (`zero`; an old file's `zero1` was folded into it on load)."""
        return self.zero

    def cp(self, pipeline: int) -> int:
        """Context-parallel degree of a pipeline (its cp-block's size)."""
        return self.pipelines[pipeline].stages[0].cp or 1

    @property
    def shard_fractions(self) -> tuple[float, ...]:
        """Each pipeline's share of the ZeRO-sharded state (even when the plan gives none)."""
        n = len(self.pipelines)
        return tuple(p.shard_fraction if p.shard_fraction is not None else 1 / n
                     for p in self.pipelines)

    @property
    def num_layers(self) -> int:
        return self.pipelines[0].stages[-1].layers[1]

    def device_groups(self, pipeline: int) -> tuple[Stage, ...]:
        """The distinct device groups of a pipeline (first S chunks under interleaving)."""
        stages = self.pipelines[pipeline].stages
        return stages[: len(stages) // self.virtual_stages]

    # --- I/O -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_json(self) -> str:
        """Deterministic text: fixed key order, no set iteration, trailing newline."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: str | Path) -> None:
        if self.model is None or self.cluster is None:
            raise SpecError(str(path), None, "a plan file must embed its model and cluster specs")
        write_output(path, self.to_json())

    @classmethod
    def from_dict(cls, data: Any, where: str = "plan") -> Plan:
        if not isinstance(data, dict):
            raise SpecError(where, None, f"expected a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            msg = err["msg"].removeprefix("Value error, ")
            bad = err.get("input")
            if isinstance(bad, float) and not math.isfinite(bad):
                msg = f"{bad} is not a finite number; write a number"
            elif err["type"] == "less_than_equal" and type(err["ctx"]["le"]) is int:
                msg = (f"{err['input']} is above hetplan's limit of "
                       f"{limit_text(err['ctx']['le'])}; check the plan file")
            raise SpecError(where, field, msg) from None

    @classmethod
    def load(cls, path: str | Path, note: Callable[[str], None] | None = None) -> Plan:
        """The plan in `path`; `note` gets the line saying an older spelling was read."""
        p = Path(path)
        # `predicted` of an infeasible plan may hold Infinity: non-finite numbers are allowed
        # here and refused by the fields that cannot take them.
        data = load_json(p, str(p), what="plan", finite=False)
        plan = cls.from_dict(data, where=str(p))
        if note is not None and (line := zero1_note(data, str(p))):
            note(line)
        if plan.model is None or plan.cluster is None:
            raise SpecError(str(p), "model" if plan.model is None else "cluster",
                            "missing; a plan file must embed its model and cluster specs")
        return plan


def _bad_count(value: Any) -> bool:
    return isinstance(value, str | bool) or (isinstance(value, float) and not value.is_integer())


def _check_counts(data: dict[str, Any]) -> None:
    """Raise ValueError naming the first count written as text, a boolean or a fraction."""
    if any(_bad_count(v) for v in _count_values(data)):
        _name_bad_count(data)


def _count_values(data: dict[str, Any]) -> Iterator[Any]:
    """The values `_name_bad_count` checks, without building their names (a plan of many
    ranks is checked on every search candidate)."""
    yield data.get("global_batch_size")
    yield data.get("micro_batch_size")
    yield data.get("virtual_stages")
    yield data.get("zero")
    pipes = data.get("pipelines")
    for pipe in pipes if isinstance(pipes, list) else []:
        if not isinstance(pipe, dict):
            continue
        yield pipe.get("microbatches")
        stages = pipe.get("stages")
        for st in stages if isinstance(stages, list) else []:
            if not isinstance(st, dict):
                continue
            yield st.get("tp")
            yield st.get("ep")
            yield st.get("cp")
            for key in ("layers", "ranks"):
                items = st.get(key)
                if isinstance(items, list | tuple):
                    yield from items
    ranks = data.get("ranks")
    for r in ranks if isinstance(ranks, list) else []:
        if isinstance(r, dict):
            yield r.get("rank")
            yield r.get("local_rank")


def _name_bad_count(data: dict[str, Any]) -> None:
    found: list[tuple[str, Any]] = [(k, data.get(k)) for k in
                                    ("global_batch_size", "micro_batch_size", "virtual_stages",
                                     "zero")]
    for p, pipe in enumerate(data.get("pipelines") or [] if isinstance(
            data.get("pipelines"), list) else []):
        if not isinstance(pipe, dict):
            continue
        found.append((f"pipelines.{p}.microbatches", pipe.get("microbatches")))
        stages = pipe.get("stages")
        for s, st in enumerate(stages if isinstance(stages, list) else []):
            if not isinstance(st, dict):
                continue
            where = f"pipelines.{p}.stages.{s}"
            found += [(f"{where}.tp", st.get("tp")), (f"{where}.ep", st.get("ep")),
                      (f"{where}.cp", st.get("cp"))]
            for key in ("layers", "ranks"):
                items = st.get(key)
                found += [(f"{where}.{key}.{i}", v) for i, v in
                          enumerate(items if isinstance(items, list | tuple) else [])]
    ranks = data.get("ranks")
    for i, r in enumerate(ranks if isinstance(ranks, list) else []):
        if isinstance(r, dict):
            found += [(f"ranks.{i}.rank", r.get("rank")), (f"ranks.{i}.local_rank",
                                                          r.get("local_rank"))]
    for where, value in found:
        if _bad_count(value):
            raise ValueError(f"{where}: {value!r:.40} is not a whole number; write it as one "
                             "(e.g. 2, not \"2\")")
def _check_structure(plan: Plan) -> None:
    """Cross-field rules; raises ValueError (pydantic turns it into a field error)."""
    n_layers = plan.num_layers
    v = plan.virtual_stages
    if v > 1 and plan.schedule != "interleaved":
        raise ValueError(f"virtual_stages is {v} but schedule is {plan.schedule!r}; "
                         "use schedule 'interleaved' or virtual_stages 1")
    check_fractions(plan)
    used: dict[int, str] = {}
    for p_idx, pipe in enumerate(plan.pipelines):
        where = f"pipelines.{p_idx}"
        cursor = 0
        for s_idx, st in enumerate(pipe.stages):
            if st.layers[0] != cursor:
                raise ValueError(f"{where}.stages.{s_idx}: layers start at {st.layers[0]}, "
                                 f"expected {cursor} (stages must cover the layers in order)")
            cursor = st.layers[1]
        if cursor != n_layers:
            raise ValueError(f"{where}: stages end at layer {cursor}, "
                             f"pipeline 0 ends at {n_layers}")
        if len(pipe.stages) % v:
            raise ValueError(f"{where}: {len(pipe.stages)} chunks do not divide into "
                             f"{v} virtual stages")
        groups = len(pipe.stages) // v
        for s_idx, st in enumerate(pipe.stages):
            home = pipe.stages[s_idx % groups]
            if s_idx >= groups:
                if st.ranks != home.ranks:
                    raise ValueError(f"{where}.stages.{s_idx}: chunk {s_idx} must run on the ranks "
                                     f"of stage {s_idx % groups} under interleaving")
                continue
            for r in st.ranks:
                if r in used:
                    raise ValueError(f"rank {r} is used by {used[r]} and {where}.stages.{s_idx}")
                used[r] = f"{where}.stages.{s_idx}"
        # Plain 1F1B with fewer micro-batches than stages is legal (Megatron's warm-up is
        # min(S - s - 1, m): every forward, then every backward); interleaving is not.
        if plan.schedule == "interleaved" and v > 1 and pipe.microbatches < groups:
            raise ValueError(f"{where}: {pipe.microbatches} micro-batches < {groups} stages; "
                             f"interleaved needs at least one micro-batch per stage")
    check_expert_groups(plan)
    check_context_groups(plan)
    # A cp-block's pipelines share their samples: each block counts once.
    firsts = [p for i, p in enumerate(plan.pipelines) if i % (p.stages[0].cp or 1) == 0]
    total = sum(p.microbatches for p in firsts) * plan.micro_batch_size
    if total != plan.global_batch_size:
        mbs = " + ".join(str(p.microbatches) for p in firsts)
        blocks = (" (one term per cp-block: its cp pipelines run the same samples)"
                  if len(firsts) < len(plan.pipelines) else "")
        raise ValueError(f"micro-batches ({mbs}) × micro_batch_size {plan.micro_batch_size} = "
                         f"{total} ≠ global_batch_size {plan.global_batch_size}{blocks}")
    table = {r.rank: r for r in plan.ranks}
    if len(table) != len(plan.ranks):
        raise ValueError("ranks: a rank is listed twice")
    if sorted(table) != list(range(len(table))):
        raise ValueError(f"ranks: must be 0..{len(table) - 1} each once")
    missing = sorted(set(used) - set(table))
    if missing:
        raise ValueError(f"ranks {missing[:5]} appear in stages but not in the ranks table")
    unused = sorted(set(table) - set(used))
    if unused:
        raise ValueError(f"ranks {unused[:5]} are in the ranks table but serve no stage")
    slots: dict[tuple[str, int], int] = {}
    for r in plan.ranks:
        other = slots.setdefault((r.node, r.local_rank), r.rank)
        if other != r.rank:
            raise ValueError(f"ranks: ranks {other} and {r.rank} share one GPU (node {r.node}, "
                             f"local_rank {r.local_rank}); give each rank its own local_rank")
    for p_idx, pipe in enumerate(plan.pipelines):
        for s_idx, st in enumerate(pipe.stages):
            nodes = sorted({table[r].node for r in st.ranks})
            if len(nodes) > 1:
                raise ValueError(f"pipelines.{p_idx}.stages.{s_idx}: TP group spans nodes "
                                 f"{nodes}; a TP group must stay inside one node")
