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
- `vocab_parallel` / `pads_vocab`: the embedding and the LM head are split over the TP ranks
  (Megatron's `VocabParallelEmbedding` and parallel logits, torchtitan's rowwise embedding /
  colwise output, hetplan's runtime `planner/runtime/stage.py: apply_vocab_tp`): their
  parameters, GEMMs and optimizer step divide by TP, at one all-reduce of the boundary
  activation each. Megatron pads the vocabulary to a multiple of the TP degree
  (`pads_vocab`); hetplan's runtime does not, so it splits only when the degree divides the
  vocabulary (`Layer.vocab_size`) and otherwise keeps both whole on every TP rank.
- `keeps_attention_probs` / `attention_dropout`: the attention kernel materialises the s×s
  probabilities and autograd keeps them for the backward (eager or fused-softmax attention:
  a·s² elements per sequence and block, split over TP with the heads), plus, with attention
  dropout, its 1-byte mask and the dropped copy (Korthikanti et al. 2023, Table 2: 5·a·s²·b
  bytes in 16-bit). Flash kernels keep none of it, which is what the graph records. Under
  full recompute or Megatron's selective recompute only one block's worth exists at a time,
  during its recomputation.
- `p2p_blocking`: pipeline sends/receives are synchronous inside the schedule (DeepSpeed's
  `PipelineEngine`: `deepspeed/runtime/pipe/p2p.py` asserts `async_op == False` and calls
  `dist.send`/`dist.recv`, or `broadcast` on a two-rank group before torch 1.8), so each
  transfer occupies both ends instead of overlapping compute. DeepSpeed does partition the
  activation over the tensor-parallel ranks (`is_pipe_partitioned = is_model_parallel`), as
  Megatron's scatter-gather does, so the bytes per rank are the same as ours.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AMP_DEEPSPEED_MEGATRON", "DEEPSPEED_PIPELINE", "DEFAULT_FRAMEWORK", "FRAMEWORKS",
           "MEGATRON_CORE", "MEGATRON_EAGER", "SAILOR_DEEPSPEED", "Framework", "framework_named",
           "framework_of"]


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
    attention_flops_share: float = 0.5
    """Share of the graph's (non-causal) attention-core FLOPs the attention kernel computes:
    0.5 for causal flash kernels, which skip the masked upper-triangle blocks (hetplan's
    runtime calls `scaled_dot_product_attention(is_causal=True)`, whose flash and
    memory-efficient CUDA kernels do); 1.0 where the masked s×s scores are materialised."""
    vocab_parallel: bool = True
    """Embedding and LM head split over TP (False: whole on every TP rank)."""
    pads_vocab: bool = False
    """With `vocab_parallel`: the vocabulary is padded so every TP degree splits it
    (Megatron); False: only degrees that divide it do (hetplan's runtime, torchtitan)."""
    tied_grad_pairs: bool = False
    """A tied weight's two copies (first and last stage) are all-reduced per pipeline, then the
    last stage's copy joins that stage's DP all-reduce (Megatron's embedding group, DeepSpeed's
    tied_comms). False: one all-reduce over every copy of every pipeline (hetplan's runtime,
    `planner/runtime/grads.py`)."""
    tied_grad_bytes: float | None = None
    """Bytes per parameter of that per-pipeline all-reduce (None: the DP gradient bytes)."""
    p2p_blocking: bool = False
    """Pipeline p2p occupies sender and receiver (not overlapped with compute)."""
    keeps_attention_probs: bool = False
    """The s×s attention probabilities are kept for the backward (eager attention)."""
    attention_dropout: bool = False
    """With `keeps_attention_probs`: attention dropout keeps its mask and dropped copy too."""

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
        if self.attention_dropout and not self.keeps_attention_probs:
            raise ValueError("attention_dropout needs keeps_attention_probs")


DEFAULT_FRAMEWORK = Framework()

MEGATRON_EAGER = Framework(name="megatron-eager-softmax", attention_flops_share=1.0,
                           pads_vocab=True, tied_grad_pairs=True)
"""Megatron-LM 1.x-3.x style: vocab-parallel embedding and logits (padded vocabulary), the
masked s×s scores computed by a (fused) softmax kernel, as in AMP's DeepSpeed-Megatron v1.1.5
(`megatron/mpu/layers.py`, `cross_entropy.py` in its repository). The large-run validation's
default record and the Megatron weak-scaling probe (bench/megatron_weak_scaling.py); AMP and
Sailor have their own records below, which also keep the probabilities in memory."""

DEEPSPEED_PIPELINE = Framework(name="deepspeed-pipeline", attention_flops_share=1.0,
                               pads_vocab=True, tied_grad_pairs=True, p2p_blocking=True)
"""DeepSpeed's `PipelineEngine` over Megatron (BLOOM, MT-NLG)."""

SAILOR_DEEPSPEED = Framework(name="sailor-deepspeed-megatron", attention_flops_share=1.0,
                             pads_vocab=True, tied_grad_pairs=True,
                             keeps_attention_probs=True)
"""Sailor's runs: Megatron-DeepSpeed with DeepSpeed's pipeline engine (`deepspeed/pipe_engine.py`
in Sailor's repository), non-blocking as `MEGATRON_EAGER` prices it (docs/cost-model.md §7).
Its attention is eager: `baddbmm` scores, `FusedScaleMaskSoftmax`, `bmm` with the kept
probabilities (`megatron/model/gpt_neo_model.py`), which defines an attention dropout but
never applies it."""

AMP_DEEPSPEED_MEGATRON = Framework(name="deepspeed-megatron-1.1.5", attention_flops_share=1.0,
                                   pads_vocab=True, tied_grad_pairs=True, tied_grad_bytes=2,
                                   keeps_attention_probs=True, attention_dropout=True)
"""AMP's runs (DeepSpeed v0.3-era fork with Megatron-LM v1.1.5, fp16): Megatron's layers, and
DeepSpeed's `_exec_reduce_tied_grads`, which all-reduces the fp16 `.grad` of the tied
embedding over each pipeline's first and last stage (`fp32_allreduce` applies to the DP
all-reduce only), Megatron's eager attention with dropout on the probabilities. Its
blocking p2p is left out: modelled, it made every AMP figure worse
(docs/cost-model.md §7)."""

MEGATRON_CORE = Framework(name="megatron", pads_vocab=True, tied_grad_pairs=True)
"""Megatron-LM / Megatron-core as launched today: causal flash attention, vocab-parallel
embedding and head, the embedding group for tied weights (for teams that plan with hetplan and
launch Megatron themselves; `hetplan launch` always runs hetplan's runtime)."""

FRAMEWORKS = {"hetplan": DEFAULT_FRAMEWORK, "megatron": MEGATRON_CORE}
"""The runtimes `hetplan plan / estimate --framework` price."""


def framework_of(plan_predicted: dict | None) -> str:
    """The framework name a plan file was priced for (`predicted.framework`; "hetplan" when
    absent: plans written before the field, or by hand)."""
    return str((plan_predicted or {}).get("framework", "hetplan"))


def framework_named(name: str | None, plan_predicted: dict | None = None) -> Framework:
    """The framework record for a CLI name; without one, the framework a plan file was priced
    for (`framework_of`), else hetplan's. HetplanError (one line) for an unknown name."""
    from planner.errors import HetplanError

    name = name or framework_of(plan_predicted)
    if name not in FRAMEWORKS:
        raise HetplanError(f"--framework {name!r}: use one of {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]
