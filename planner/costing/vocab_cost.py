"""What a vocabulary split over TP divides, and what it leaves whole, for the embedding and
the LM head: parameters, saved activations, and the collectives that run in each pass.

The runtime splits only the token table's rows (`planner/runtime/vocab_embed.py`) and the LM
head's output columns (`stage.apply_vocab_tp`); everything else in those two chain elements
stays whole on every TP rank, as in Megatron, whose position table is a plain
`torch.nn.Embedding` (megatron/core/models/common/embeddings/language_model_embedding.py) and
whose final norm and output layer see the same hidden states on every TP rank without
sequence parallelism (megatron/core/tensor_parallel/mappings.py,
`copy_to_tensor_model_parallel_region`).
"""

from __future__ import annotations

from cost_models.comm import Link, allreduce_s
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.graph.layers import Layer, LayerGraph

__all__ = ["LOSS_ALLREDUCES", "LOGPROB_BYTES", "head_input_whole_under_sp", "head_split_bytes",
           "loss_transient_bytes", "vocab_params", "vocab_tp_comm_s", "whole_params"]

LOGPROB_BYTES = 4
"""Bytes per logit the loss keeps for the backward: the fp32 log-probabilities (our
`loss_fn` casts the logits to fp32; torch's `log_softmax` saves its result, and
`loss_parallel` saves this rank's vocab / TP columns of it; Megatron's vocab-parallel
cross-entropy keeps its fp32 softmax the same way, megatron/core/tensor_parallel/
cross_entropy.py)."""

LOSS_ALLREDUCES = 3
"""All-reduces of one fp32 number per token in the forward of a cross-entropy over logits
split by vocabulary: the row maximum, the sum of exponentials and the target's logit
(torch/distributed/tensor/parallel/loss.py: `_log_softmax`, `_nll_loss_forward`; Megatron's
`_VocabParallelCrossEntropy.forward` the same three). Its backward is local."""


def vocab_params(layer: Layer) -> float:
    """Parameters of an embedding or head layer that a vocab split divides: the vocab × hidden
    table, less the part a tied head shares with the embedding (counted there); 0 when the
    graph does not know the vocabulary (then every parameter is taken as split)."""
    if layer.kind not in ("embedding", "head") or layer.vocab_size <= 0:
        return float(layer.params)
    table = float(layer.vocab_size) * layer.matmul_dim
    if layer.kind == "head":
        table = max(0.0, table - layer.tied_params)
    return min(float(layer.params), table)


def whole_params(layer: Layer) -> float:
    """Parameters of a split embedding or head held whole on every TP rank: GPT's learned
    position table, the final norm's weight (and bias)."""
    return float(layer.params) - vocab_params(layer)


def head_split_bytes(layer: Layer, graph: LayerGraph, saved: float) -> float:
    """Of the `saved` bytes per sequence a split LM head keeps, the part split over TP: the
    loss's fp32 log-probabilities, seq × vocab × 4 B. The rest, the final norm's input (and
    its statistics) and the LM head's input, is whole on every TP rank (measured with
    saved-tensor hooks, tests/test_vocab_tp_pricing.py)."""
    if layer.kind != "head" or layer.vocab_size <= 0:
        return saved
    return min(saved, float(graph.seq_len) * layer.vocab_size * LOGPROB_BYTES)


def head_input_whole_under_sp(fw: Framework) -> bool:
    """Whether the head's hidden-sized inputs stay whole on every TP rank under sequence
    parallelism too: hetplan's runtime gathers the sequence at the end of the SP blocks, so
    the head sees whole activations (runtime/seqpar.py). Megatron and torchtitan run the
    final norm sequence-parallel (Megatron's output layer also saves its split input and
    gathers it again in the backward), so for their records the ÷ TP price stays."""
    return fw.name == DEFAULT_FRAMEWORK.name


def loss_transient_bytes(layer: Layer, graph: LayerGraph, fw: Framework, ts: int) -> float:
    """Bytes per sequence the head's loss holds at once beyond the saved fp32 log-probabilities
    (priced as activations), at the peak of its forward or its backward, whichever is higher:
    seq × vocab / ts logits of it, with `ts` the head's TP split. The two peaks are of
    different phases, so they do not add (tests/test_head_peak.py measures them).

    hetplan's runtime and torchtitan (`cross_entropy(logits.float(), labels)`):
      forward: the logits and their fp32 copy (the same tensor for fp32 logits) beside the
      log-probabilities; backward at TP 1: `nll_loss_backward`'s fp32 gradient and
      `_log_softmax_backward_data`'s fp32 result beside the saved log-probabilities, 8 B.
      Under `loss_parallel` (split logits): the forward's `shifted` and its `exp` 8 B more
      (torch/distributed/tensor/parallel/loss.py `_log_softmax`), the backward's
      `zeros_like` gradient, `exp(x)` and their sum beside the saved log-probabilities,
      12 B (`_nll_loss_and_log_softmax_backward`).
    Megatron's vocab-parallel cross-entropy (the records that pad the vocabulary) works in
    place on its fp32 copy (megatron/core/tensor_parallel/cross_entropy.py: `-=`,
    `torch.exp(out=)`, `div_`, and in the backward the saved softmax becomes the gradient):
    only the 16-bit logits beside the copy in the forward, and the gradient's 16-bit cast
    in the backward."""
    if layer.kind != "head" or layer.vocab_size <= 0:
        return 0.0
    d = graph.dtype_bytes
    upcast = d + (LOGPROB_BYTES if d < LOGPROB_BYTES else 0)  # logits + their fp32 copy
    if fw.pads_vocab:
        per_logit = upcast - LOGPROB_BYTES
    elif ts > 1:
        per_logit = max(upcast + LOGPROB_BYTES, 3 * LOGPROB_BYTES)
    else:
        per_logit = max(upcast, 2 * LOGPROB_BYTES)
    return float(graph.seq_len) * layer.vocab_size / ts * per_logit


def vocab_tp_comm_s(layer: Layer, graph: LayerGraph, sequences: float, tp: int,
                    link: Link) -> tuple[float, float]:
    """(forward, backward) seconds of the TP collectives of a split embedding or head, for
    `sequences` sequences on this TP group.

    Embedding: the partial lookups are all-reduced in the forward; the backward is the
    identity (vocab_embed.py; Megatron's `reduce_from_tensor_model_parallel_region`).
    Head: the column-parallel LM head's input is replicated, so its forward has no
    collective and its backward all-reduces the input's gradient (DTensor's ColwiseParallel
    with Replicate input; Megatron's `copy_to_tensor_model_parallel_region`); the loss on
    split logits adds `LOSS_ALLREDUCES` small all-reduces to the forward."""
    hidden = allreduce_s(sequences * layer.tp_allreduce_bytes, tp, link)
    if layer.kind == "embedding":
        return layer.tp_allreduces_fwd * hidden, 0.0
    loss = LOSS_ALLREDUCES * allreduce_s(sequences * graph.seq_len * 4.0, tp, link)
    return loss, layer.tp_allreduces_fwd * hidden
