"""How the training framework that runs a plan executes it, where that changes the cost.

The default (`Framework()`) is hetplan's own runtime, and every default of `estimate` and
`stage_cost` describes it; the search mirrors those defaults. Other frameworks differ in
measurable, physical ways, and the accuracy report describes each measured run's framework
with one of these records instead of bending the shared constants:

- `memory_traffic_scale`: the share of the graph's eager-PyTorch memory-bound block traffic the
  framework's kernels actually move (fused kernels: `cost_models.fusion.fused_traffic_ratio`).
- `recompute_gemm_fraction` / `recompute_memory_fraction`: what a `selective` recompute policy
  re-runs in the backward, as fractions of the block's forward GEMM work and memory-bound
  work, for frameworks whose selective checkpointing is not Megatron's (Korthikanti et al.
  2023: the attention core only). None: Megatron's.
- `attention_flops_share`: the graph counts attention non-causal (Korthikanti eq. 7); causal
  flash kernels (FlashAttention-2, Dao 2023, §3.1: blocks above the diagonal are skipped; cuDNN
  / Transformer Engine fused attention likewise) compute about half of it, forward and
  backward. Frameworks that materialise the masked s×s scores (Megatron's 2021-22 fused
  softmax path) compute all of it.
- `p2p_blocking`: pipeline sends/receives are synchronous inside the schedule (DeepSpeed's
  `PipelineEngine`: `deepspeed/runtime/pipe/p2p.py` asserts `async_op == False` and calls
  `dist.send`/`dist.recv`, or `broadcast` on a two-rank group before torch 1.8), so each
  transfer occupies both ends instead of overlapping compute. DeepSpeed does partition the
  activation over the tensor-parallel ranks (`is_pipe_partitioned = is_model_parallel`), as
  Megatron's scatter-gather does, so the bytes per rank are the same as ours.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEEPSPEED_PIPELINE", "DEFAULT_FRAMEWORK", "Framework"]


@dataclass(frozen=True, slots=True)
class Framework:
    """Execution properties of the framework that runs a plan (defaults: hetplan's runtime)."""

    name: str = "hetplan"
    memory_traffic_scale: float = 1.0
    """Multiplies each transformer block's memory-bound forward (and backward) traffic."""
    recompute_gemm_fraction: float | None = None
    """Under `selective` recompute: share of the block's forward GEMM time re-run."""
    recompute_memory_fraction: float | None = None
    """Under `selective` recompute: share of the block's forward memory-bound time re-run."""
    attention_flops_share: float = 1.0
    """Share of the graph's (non-causal) attention-core FLOPs the attention kernel computes:
    0.5 for causal flash kernels, which skip the masked upper-triangle blocks."""
    p2p_blocking: bool = False
    """Pipeline p2p occupies sender and receiver (not overlapped with compute)."""

    def __post_init__(self) -> None:
        if not 0 < self.memory_traffic_scale <= 1:
            raise ValueError(f"memory_traffic_scale must be in (0, 1], got "
                             f"{self.memory_traffic_scale}")
        for name in ("recompute_gemm_fraction", "recompute_memory_fraction"):
            x = getattr(self, name)
            if x is not None and not 0 <= x <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {x}")
        if not 0.5 <= self.attention_flops_share <= 1:
            raise ValueError(f"attention_flops_share must be in [0.5, 1], got "
                             f"{self.attention_flops_share}")
        if (self.recompute_gemm_fraction is None) != (self.recompute_memory_fraction is None):
            raise ValueError("give both recompute fractions or neither")


DEFAULT_FRAMEWORK = Framework()

DEEPSPEED_PIPELINE = Framework(name="deepspeed-pipeline", p2p_blocking=True)
"""DeepSpeed's `PipelineEngine` (AMP's DeepSpeed-Megatron runs, BLOOM, MT-NLG)."""
