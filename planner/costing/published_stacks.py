"""Framework records of the stacks behind the published measurements `hetplan validate`
prices (AMP's and Sailor's DeepSpeed-Megatron forks, Megatron-LM 1.x-3.x, DeepSpeed's pipeline
engine under BLOOM and MT-NLG): each as that run's code behaved, so the validation compares
physics with physics. Not offered to `--framework`; the runtimes people choose are in
`planner.costing.framework`."""

from __future__ import annotations

from planner.costing.framework import MEGATRON_STYLE, Framework

__all__ = ["AMP_DEEPSPEED_MEGATRON", "DEEPSPEED_PIPELINE", "MEGATRON_EAGER", "SAILOR_DEEPSPEED"]

MEGATRON_EAGER = Framework(**MEGATRON_STYLE, attention_kernel="", max_zero=1,
                           name="megatron-eager-softmax",
                           vocab_loss="megatron-clone",
                           attention_flops_share=1.0,
                           pads_vocab=True, tied_grad_pairs=True)
"""Megatron-LM 1.x-3.x style: vocab-parallel embedding and logits (padded vocabulary), the
masked s×s scores computed by a (fused) softmax kernel, as in AMP's DeepSpeed-Megatron v1.1.5
(`megatron/mpu/layers.py`, `cross_entropy.py` in its repository). The large-run validation's
default record and the Megatron weak-scaling probe (bench/megatron_weak_scaling.py); AMP and
Sailor have their own records below, which also keep the probabilities in memory."""

DEEPSPEED_PIPELINE = Framework(**MEGATRON_STYLE, attention_kernel="", max_zero=1,
                               name="deepspeed-pipeline",
                               vocab_loss="megatron-inplace",
                               attention_flops_share=1.0,
                               pads_vocab=True, tied_grad_pairs=True, p2p_blocking=True)
"""DeepSpeed's `PipelineEngine` over Megatron (BLOOM, MT-NLG)."""

SAILOR_DEEPSPEED = Framework(**MEGATRON_STYLE, attention_kernel="",
                             name="sailor-deepspeed-megatron",
                             vocab_loss="megatron-clone",
                             attention_flops_share=1.0,
                             max_zero=1, pads_vocab=True, tied_grad_pairs=True,
                             keeps_attention_probs=True, score_passes=(4, 5),
                             eager_attention_gemms=True)
"""Sailor's runs: Megatron-DeepSpeed with DeepSpeed's pipeline engine (`deepspeed/pipe_engine.py`
in Sailor's repository), non-blocking as `MEGATRON_EAGER` prices it (docs/cost-model.md §7).
Its attention is eager: `baddbmm` scores, `FusedScaleMaskSoftmax`, `bmm` with the kept
probabilities (`megatron/model/gpt_neo_model.py`), which defines an attention dropout but
never applies it. Sailor trained in fp32, and Megatron's `FusedScaleMaskSoftmax` runs its
fused kernel only for 16-bit inputs (`is_kernel_available`), so the mask (`masked_fill_`,
read and write) and the softmax (read and write) are separate passes over the s×s scores,
and their gradients one pass more (softmax backward reads the output and the gradient):
`score_passes` (4, 5). The score GEMMs are cuBLAS `baddbmm` / `bmm`: `eager_attention_gemms`."""

AMP_DEEPSPEED_MEGATRON = Framework(**MEGATRON_STYLE, attention_kernel="",
                                   name="deepspeed-megatron-1.1.5",
                                   vocab_loss="megatron-clone",
                                   attention_flops_share=1.0,
                                   max_zero=1, pads_vocab=True, tied_grad_pairs=True,
                                   tied_grad_bytes=2, keeps_attention_probs=True,
                                   attention_dropout=True)
"""AMP's runs (DeepSpeed v0.3-era fork with Megatron-LM v1.1.5, fp16): Megatron's layers, and
DeepSpeed's `_exec_reduce_tied_grads`, which all-reduces the fp16 `.grad` of the tied
embedding over each pipeline's first and last stage (`fp32_allreduce` applies to the DP
all-reduce only), Megatron's eager attention with dropout on the probabilities. Its
blocking p2p is left out: modelled, it made every AMP figure worse
(docs/cost-model.md §7). Its eager attention's score passes (in-place `masked_fill_` in
`gpt2_model.py`, softmax, dropout: (6, 7) and the dropout mask) and score GEMM shapes are
left out too: priced, they take analytic AMP from 42.0 / 29.4 % to 33.5 / 23.8 % MAPE
(T4 / het) but AMP het's ranking with profiles from ρ 0.718 to 0.638 (the shapes alone: 39.2
/ 27.6 %, ρ 0.696), all of it through the five het rows with TP >= 2, PP >= 4 and micro-batch
1-2 that no modelled cost explains (docs/cost-model.md §7); without those rows ρ is 0.958
before and 0.953 after."""
