"""Interleaved 1F1B variants of the best 1F1B plans.

Megatron's interleaved schedule gives each device group V model chunks (chunk j runs on device
j mod S) and cuts the pipeline bubble by V. The variant keeps a plan's devices, recompute
modes and per-device layer counts and deals each device's layers into V chunks (the first
chunks get the remainder), in chunk order; the estimate then decides whether the smaller
bubble outweighs the extra p2p and the activations of the extra warm-up micro-batches.
Only plans whose every pipeline has a micro-batch count divisible by its stage count qualify
(Megatron's rule).
"""

from __future__ import annotations

from planner.schema import Pipeline, Plan, Stage

__all__ = ["interleaved_variant"]


def interleaved_variant(plan: Plan, virtual_stages: int = 2) -> Plan | None:
    """The plan with V chunks per device, or None when it does not qualify."""
    v = virtual_stages
    if plan.schedule != "1f1b" or v < 2:
        return None
    pipes = []
    for pipe in plan.pipelines:
        devices = pipe.stages
        s_count = len(devices)
        counts = [st.layers[1] - st.layers[0] for st in devices]
        if s_count < 2 or pipe.microbatches % s_count or min(counts) < v:
            return None
        chunks: list[list[int]] = [[c // v + (1 if r < c % v else 0) for r in range(v)]
                                   for c in counts]
        stages, cursor = [], 0
        for r in range(v):
            for s, dev in enumerate(devices):
                size = chunks[s][r]
                stages.append(Stage(layers=(cursor, cursor + size), gpu=dev.gpu, tp=dev.tp,
                                    ranks=dev.ranks, recompute=dev.recompute, ep=dev.ep,
                                    cp=dev.cp))
                cursor += size
        pipes.append(Pipeline(microbatches=pipe.microbatches, stages=tuple(stages)))
    return plan.model_copy(update={"schedule": "interleaved", "virtual_stages": v,
                                   "pipelines": tuple(pipes), "predicted": None})
