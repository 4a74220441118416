"""Export a plan to another training framework: Megatron-LM arguments or a torchtitan TOML.

    text = export_plan(plan, "megatron")      # raises NotExpressible with the reason

A plan those frameworks cannot express (per-stage TP, mixed GPU pipelines, heterogeneous DP)
is refused; `NotExpressible.nearest` then holds the best uniform plan and its estimate.
"""

from __future__ import annotations

from typing import Any

from planner.costing import DEFAULT_FRAMEWORK, Estimate
from planner.costing.framework import MEGATRON_CORE
from planner.errors import HetplanError
from planner.export.megatron import megatron_text, sequence_parallel_forced
from planner.export.predicted import prediction_notes
from planner.export.torchtitan import torchtitan_toml
from planner.export.uniform import UniformShape, uniform_shape
from planner.schema import Plan

__all__ = ["TARGETS", "NotExpressible", "export_plan"]

TARGETS = ("megatron", "torchtitan")
_FRAMEWORK = {"megatron": MEGATRON_CORE, "torchtitan": DEFAULT_FRAMEWORK}
_ZERO_SHARDS = {1: "optimizer state", 2: "optimizer state and gradients",
                3: "optimizer state, gradients and weights"}


class NotExpressible(HetplanError):
    """The plan has no equivalent in the target framework; `nearest` is the best one it has."""

    def __init__(self, target: str, reason: str,
                 nearest: tuple[Plan, Estimate] | None) -> None:
        super().__init__(f"{target} cannot express this plan: {reason}")
        self.target = target
        self.reason = reason
        self.nearest = nearest


def _reason(shape: UniformShape | str, target: str, model: dict[str, Any]) -> str | None:
    if isinstance(shape, str):
        return shape
    if target == "megatron" and shape.schedule == "gpipe":
        return "Megatron-LM has no GPipe schedule (its pipeline schedules are 1F1B and interleaved)"
    return None


def _notes(plan: Plan, shape: UniformShape, target: str) -> list[str]:
    model = plan.model or {}
    cluster = plan.cluster or {}
    world = shape.tp * shape.cp * shape.pp * shape.dp
    cp = f"CP {shape.cp} × " if shape.cp > 1 else ""
    notes = [f"hetplan export --to {target}: {model.get('name', 'model')} on "
             f"{cluster.get('name', 'cluster')}, {world} × {shape.gpu}: TP {shape.tp} × "
             f"{cp}PP {shape.pp} × DP {shape.dp}, {shape.microbatches_per_pipeline} micro-batches "
             f"of {shape.micro_batch_size} per replica, schedule {shape.schedule}"]
    # Re-estimated: the stored block may predate an edit.
    notes += prediction_notes(plan, _FRAMEWORK[target])
    if not shape.megatron_rank_order:
        notes.append("the plan's rank order differs from the framework's (TP fastest, then DP, "
                     "then PP): stages land on nodes by launch order, not where the plan put them")
    if target == "megatron":
        notes.append("vocabulary, tokenizer, data and optimizer arguments are yours to add")
        if shape.zero >= 2 and shape.dp * shape.cp > 1:
            notes.append(f"the plan shards {_ZERO_SHARDS[shape.zero]} (ZeRO-{shape.zero}); "
                         "--use-distributed-optimizer shards optimizer state only: for the "
                         "rest use Megatron-FSDP (pp 1), or expect more memory per GPU than "
                         "predicted")
        if sequence_parallel_forced(shape):
            notes.append("--sequence-parallel added: Megatron-Core refuses expert parallelism "
                         "with tensor parallelism without it; the plan was priced without "
                         "sequence parallel (its activation memory and TP traffic differ)")
        if model.get("shared_expert_gate"):
            notes.append("the shared expert's sigmoid gate (Qwen-MoE) has no flag here: add "
                         "your Megatron version's shared-expert gate option")
        if shape.virtual_stages > 1 and shape.pp <= 2:
            notes.append("Megatron's validate_args allows interleaving on 2 pipeline stages "
                         "only with p2p overlap on (--overlap-p2p-communication in versions "
                         "where it is off by default)")
    elif 1 <= shape.zero < 3 and shape.dp > 1:
        notes.append(f"the plan shards {_ZERO_SHARDS[shape.zero]} over DP "
                     f"(ZeRO-{shape.zero}); torchtitan's nearest is FSDP "
                     "(data_parallel_shard_degree), which also shards "
                     f"{'weights and gradients' if shape.zero == 1 else 'weights'}")
    if target == "torchtitan" and shape.tp > 1 and not shape.sequence_parallel:
        notes.append("torchtitan's tensor parallelism always shards norms over the sequence "
                     "(sequence parallel); the plan was priced without it")
    return notes


def export_plan(plan: Plan, target: str, *, nearest: bool = True) -> str:
    """The framework's configuration for `plan` (text), or NotExpressible with the reason and,
    when `nearest`, the best uniform plan on the plan's cluster."""
    if target not in TARGETS:
        raise HetplanError(f"--to {target!r}: use one of {', '.join(TARGETS)}")
    model = plan.model or {}
    if target == "torchtitan" and model.get("architecture") != "llama":
        raise HetplanError(f"torchtitan cannot express this plan: its model zoo has Llama-family "
                           f"models only, and {model.get('name', 'this model')} has architecture "
                           f"{model.get('architecture')!r}")
    if target == "torchtitan" and model.get("num_experts"):
        raise HetplanError(f"torchtitan cannot express this plan: "
                           f"{model.get('name', 'this model')} has {model['num_experts']} "
                           "experts per block and the exported config names torchtitan's "
                           "dense Llama modules; use --to megatron")
    shape = uniform_shape(plan)
    reason = _reason(shape, target, model)
    if reason is not None:
        from planner.export.nearest import nearest_uniform

        found = nearest_uniform(plan, _FRAMEWORK[target]) if nearest else None
        raise NotExpressible(target, reason, found)
    assert isinstance(shape, UniformShape)
    notes = _notes(plan, shape, target)
    if target == "megatron":
        return megatron_text(shape, model, notes)
    return torchtitan_toml(shape, model, notes)
