"""Plain records the pipeline simulator reads and writes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMPUTE_KINDS", "KINDS", "Event", "StageTiming", "Timeline"]

KINDS = ("fwd", "recompute", "bwd", "send", "send_grad", "dp_sync", "optimizer")
"""Event kinds: compute (`fwd`, `recompute`, `bwd`), p2p (`send` carries activations to the next
chunk, `send_grad` carries gradients to the previous one), and the per-device tail
(`dp_sync` gradient all-reduce, `optimizer` step)."""
COMPUTE_KINDS = ("fwd", "recompute", "bwd")


@dataclass(frozen=True, slots=True)
class StageTiming:
    """One chunk (a stage, or one model chunk of a device under interleaving)."""

    fwd_s: float
    """Forward of one micro-batch."""
    bwd_s: float
    """Backward of one micro-batch, including recomputation."""
    send_s: float
    """p2p time to the next chunk per micro-batch (the gradient coming back takes the same); 0 for
    the last chunk."""
    device: int
    """Device group that runs the chunk: chunk j runs on device j % S (S devices)."""
    recompute_s: float = 0.0
    """The part of `bwd_s` spent re-running the forward (drawn apart in Gantt charts)."""


@dataclass(frozen=True, slots=True)
class Event:
    device: int
    kind: str
    """One of KINDS."""
    microbatch: int
    """-1 for `dp_sync` and `optimizer`."""
    chunk: int
    """The chunk that runs the op (for sends: the sending chunk; -1 for the tail)."""
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class Timeline:
    makespan_s: float
    """From the first forward to the end of the last optimizer step (iteration time)."""
    bubble_fraction: float
    """Idle share of the devices' time until the last backward ends:
    1 − Σ busy_s / (S · pipeline_s). Uniform 1F1B/GPipe: (S−1)/(m+S−1)."""
    busy_s: tuple[float, ...]
    """Per device: forward + backward (incl. recompute) time of all its chunks."""
    events: tuple[Event, ...]
    """Per device in execution order (compute, then tail); sends after all compute."""
    max_inflight: tuple[int, ...]
    """Per device: peak number of (micro-batch, chunk) pairs whose activations are held, a pair
    counted from its forward's start to its backward's end. Without interleaving this is
    micro-batches (1F1B: stage s of S holds S−s); with V chunks per device each pair holds one
    chunk's activations (Megatron: V·S + S − 1 − 2s on device s when m > S)."""
    pipeline_s: float = 0.0
    """When the last backward ends (before DP sync and optimizer step)."""
    num_devices: int = 0
    num_chunks: int = 0
    microbatches: int = 0
    schedule: str = "1f1b"
    virtual_stages: int = 1
    chunks: tuple[StageTiming, ...] = ()
    """The inputs, so that `with_events` can redo a `detail=False` run with its events."""
    dp_sync_s: tuple[float, ...] = ()
    optimizer_s: tuple[float, ...] = ()
