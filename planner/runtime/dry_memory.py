"""How much host memory a dryrun needs, before it starts, and how the reference is chunked.

Each worker holds: the interpreter with torch and gloo (a fixed base), a per-chain-element
overhead (modules, hooks, DTensor state), the whole tiny model twice (its share in the
pipeline runner and the one-process reference) with gradients and Adam state, the
activations of the micro-batches its stage keeps in flight, and the reference's activations
for one chunk of the global batch (the reference accumulates gradients chunk by chunk, so a
plan with 128 micro-batches does not keep 128 sequences of activations in every worker).

The base and per-element figures were measured on this machine (torch 2.13 CPU, gloo,
`/proc/self/smaps_rollup` of forked workers): a 3-rank, 6-element plan's workers held
111-124 MiB private after a step; the same plan 82 elements deep 204 MiB, i.e. about
1.1 MiB per element. Activation bytes come from the tiny model's own LayerGraph (fp32, as
dryrun runs), × 1.5 for what autograd and the allocator keep beyond the saved tensors.
Checked against the README's llama3-70b plan on lab-mixed (14 workers, 82 elements, 128
micro-batches): see docs/runtime.md for estimate vs measured peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.graph.layers import LayerGraph
from planner.graph.spec import ModelSpec
from planner.schema import Plan

__all__ = ["DryrunMemory", "available_gib", "dryrun_memory", "fp32_graph"]

GIB = 2**30
BASE_BYTES = 130 * 2**20
"""Per worker: interpreter, torch, gloo (measured 111-124 MiB private after a 6-element
plan's step, which includes its small model and activations)."""
PER_ELEMENT_BYTES = int(1.1 * 2**20)
"""Per chain element held by a worker (measured: 82 vs 6 elements, +81 MiB)."""
ACTIVATION_SLACK = 1.5
"""Autograd and allocator overhead over the saved-tensor bytes (assumption, conservative)."""
BYTES_PER_PARAM = 4 * 4
"""fp32 weights, gradients, Adam m and v."""
REFERENCE_BUDGET_BYTES = 128 * 2**20
"""Reference activations per worker; the chunk size follows from it."""


@dataclass(frozen=True)
class DryrunMemory:
    per_worker_bytes: float
    workers: int
    reference_chunk: int
    """Rows of the global batch per reference forward/backward."""

    @property
    def total_gib(self) -> float:
        return self.per_worker_bytes * self.workers / GIB


def fp32_graph(spec: ModelSpec) -> LayerGraph:
    """The LayerGraph of `spec` as dryrun runs it (fp32 on CPU)."""
    from planner.graph.extract import extract

    return extract(spec.replace(training={**spec.training.model_dump(), "precision": "fp32"}))


def dryrun_memory(plan: Plan, graph: LayerGraph) -> DryrunMemory:
    """The memory the dryrun of `plan` (already shrunk) needs for the model `graph` measures
    (activation bytes scaled to fp32, as dryrun runs on CPU)."""
    scale = 4 / graph.dtype_bytes
    act = [layer.activation_bytes * scale * ACTIVATION_SLACK for layer in graph.layers]
    per_seq = sum(act)
    chunk = max(1, min(plan.global_batch_size, int(REFERENCE_BUDGET_BYTES // max(per_seq, 1))))
    whole = graph.params * BYTES_PER_PARAM * 2
    worst_stage = 0.0
    v = plan.virtual_stages
    for pipe in plan.pipelines:
        s_count = len(pipe.stages) // v
        held = pipe.microbatches if plan.schedule == "gpipe" else min(
            pipe.microbatches, s_count * v)
        for d in range(s_count):
            layers = [i for st in pipe.stages[d::s_count] for i in range(*st.layers)]
            stage_act = sum(act[i] for i in layers) * plan.micro_batch_size * held
            worst_stage = max(worst_stage, stage_act)
    per_worker = (BASE_BYTES + len(graph.layers) * PER_ELEMENT_BYTES + whole
                  + worst_stage + chunk * per_seq)
    return DryrunMemory(per_worker, len(plan.ranks), chunk)


def available_gib() -> float | None:
    """MemAvailable of /proc/meminfo (Linux), else None (unknown: no check)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None

