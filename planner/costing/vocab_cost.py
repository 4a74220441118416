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

from cost_models.comm import Link, allgather_s, allreduce_s, reduce_scatter_s
from planner.costing.framework import DEFAULT_FRAMEWORK, Framework
from planner.graph.layers import Layer, LayerGraph

__all__ = ["LOSS_ALLREDUCES", "LOGPROB_BYTES", "head_hidden_saved_bytes", "head_split_bytes",
           "loss_transient_bytes", "vocab_memory_share", "vocab_params", "vocab_tp_comm_s",
           "vocab_traffic_bytes", "whole_params"]

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


def vocab_traffic_bytes(layer: Layer, graph: LayerGraph) -> float:
    """Of a head's forward memory-bound traffic per sequence (`Layer.fwd_memory_bytes`), the
    part over vocabulary-sized tensors, which a vocab split divides: the graph measures the
    loss as `loss_fn` runs it, `cross_entropy(logits.float(), ...)`: the fp32 cast (reads the
    16-bit logits, writes 4 B; nothing for fp32 logits), `_log_softmax` (reads and writes 4 B)
    and `nll_loss_forward` (reads the 4 B log-probabilities), seq × vocab logits each. The
    rest, the final norm over seq × hidden, is hidden-sized. 0 for other layers."""
    if layer.kind != "head" or layer.vocab_size <= 0:
        return 0.0
    d = graph.dtype_bytes
    per_logit = (d + LOGPROB_BYTES if d < LOGPROB_BYTES else 0) + 3 * LOGPROB_BYTES
    return min(layer.fwd_memory_bytes, float(graph.seq_len) * layer.vocab_size * per_logit)


def vocab_memory_share(layer: Layer, graph: LayerGraph, fw: Framework, tp: int,
                       sp: bool) -> float:
    """Share of a vocab-split embedding's or head's memory-bound traffic each of `tp` ranks
    moves. The vocabulary-sized part (`vocab_traffic_bytes`) divides by TP with or without
    sequence parallelism; the hidden-sized rest stays whole on every rank, except the final
    norm under a framework that runs it sequence-parallel (`Framework.sp_gathers_before_head`
    False: Megatron, torchtitan). The embedding's traffic is its lookup's seq × hidden write
    (and the position table's), made whole on every rank (runtime/vocab_embed.py masks and
    all-reduces a full seq × hidden output; Megatron's VocabParallelEmbedding the same), so
    it does not divide."""
    total = layer.fwd_memory_bytes
    if total <= 0 or layer.kind != "head":
        return 1.0
    vocab = vocab_traffic_bytes(layer, graph)
    hidden = (total - vocab) / (tp if sp and not fw.sp_gathers_before_head else 1)
    return (hidden + vocab / tp) / total


def head_hidden_saved_bytes(layer: Layer, graph: LayerGraph, fw: Framework, hidden: float,
                            tp: int, sp: bool) -> float:
    """Of the `hidden` bytes per sequence a split head saves beside the log-probabilities (the
    final norm's input and statistics, and the LM head's input, seq × hidden at the activation
    dtype), what one of `tp` ranks keeps. Without sequence parallelism, all of it: every rank
    sees the same hidden states. Under it: all of it where the sequence is gathered before the
    final norm (`Framework.sp_gathers_before_head`, hetplan's runtime); otherwise the final
    norm's part ÷ TP, and the LM head's input whole where the framework replicates it before
    the GEMM (`sp_head_input_replicated`, torchtitan) or ÷ TP where it saves the split input
    and gathers it again in the backward (Megatron)."""
    if not sp or tp <= 1 or fw.sp_gathers_before_head:
        return hidden
    head_input = min(hidden, float(graph.seq_len) * layer.matmul_dim * graph.dtype_bytes)
    kept = head_input if fw.sp_head_input_replicated else head_input / tp
    return kept + (hidden - head_input) / tp


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
    Megatron-Core's vocab-parallel cross-entropy (`vocab_loss` "megatron-inplace") works in
    place on its fp32 copy (megatron/core/tensor_parallel/cross_entropy.py: `-=`,
    `torch.exp(out=)`, `div_`, and in the backward the saved softmax becomes the gradient):
    only the 16-bit logits beside the copy in the forward, and the gradient's 16-bit cast
    in the backward. Megatron-LM v1.1.5's ("megatron-clone", megatron/mpu/cross_entropy.py)
    clones the fp32 copy (`logits = vocab_parallel_logits.clone()`) before `exp`: the 16-bit
    logits, the fp32 copy and the clone beside the softmax in the forward, 10 B per 16-bit
    logit, 8 B per fp32 logit (there `output.float()` is the logits themselves); its
    backward, in place on the saved softmax, holds less."""
    if layer.kind != "head" or layer.vocab_size <= 0:
        return 0.0
    d = graph.dtype_bytes
    upcast = d + (LOGPROB_BYTES if d < LOGPROB_BYTES else 0)  # logits + their fp32 copy
    if fw.vocab_loss == "megatron-inplace":
        per_logit = upcast - LOGPROB_BYTES
    elif fw.vocab_loss == "megatron-clone":
        per_logit = upcast + LOGPROB_BYTES
    elif ts > 1:
        per_logit = max(upcast + LOGPROB_BYTES, 3 * LOGPROB_BYTES)
    else:
        per_logit = max(upcast, 2 * LOGPROB_BYTES)
    return float(graph.seq_len) * layer.vocab_size / ts * per_logit


def vocab_tp_comm_s(layer: Layer, graph: LayerGraph, sequences: float, tp: int,
                    link: Link, fw: Framework = DEFAULT_FRAMEWORK,
                    sp: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of the TP collectives of a split embedding or head, for
    `sequences` sequences on this TP group (each collective moves their seq × hidden
    activation, `Layer.tp_allreduce_bytes` per sequence).

    Without sequence parallelism, and under it where the sequence is whole at the embedding's
    output and the head's input (hetplan's runtime: `Framework.sp_edge_gathers`,
    `sp_gathers_before_head`; its slice and gather at the blocks' edges are priced in
    `stage_cost`):
      Embedding: the partial lookups are all-reduced in the forward; the backward is the
      identity (vocab_embed.py; Megatron's `reduce_from_tensor_model_parallel_region`).
      Head: the column-parallel LM head's input is replicated, so its forward has no
      collective and its backward all-reduces the input's gradient (DTensor's ColwiseParallel
      with Replicate input; Megatron's `copy_to_tensor_model_parallel_region`).
    Under sequence parallelism where the sequence stays split into the first block and
    through the final norm (Megatron-Core, torchtitan):
      Embedding: reduce-scatter of the partial lookups to the sequence-split layout in the
      forward, all-gather of its gradient in the backward (Megatron-Core
      `VocabParallelEmbedding(reduce_scatter_embeddings=True)`:
      `reduce_scatter_to_sequence_parallel_region`, whose backward is
      `_gather_along_first_dim`; torchtitan `"tok_embeddings": RowwiseParallel(
      output_layouts=Shard(1))`). A learned position table makes Megatron all-reduce instead
      and split locally (language_model_embedding.py: `reduce_scatter_embeddings` needs no
      position embedding; `scatter_to_sequence_parallel_region`, backward an all-gather).
      Head: all-gather of its sequence-split input before the GEMM in the forward,
      reduce-scatter of the input's gradient in the backward (Megatron-Core
      `LinearWithGradAccumulationAndAsyncCommunication` with `sequence_parallel`; torchtitan
      `"output": ColwiseParallel(input_layouts=Shard(1))`), and where the framework saves
      the split input (`sp_head_input_replicated` False: Megatron) its all-gather once more
      in the backward for the weight gradient.
    The loss on split logits adds `LOSS_ALLREDUCES` small all-reduces to the head's forward."""
    hidden = sequences * layer.tp_allreduce_bytes
    n = layer.tp_allreduces_fwd
    split_sp = sp and tp > 1
    if layer.kind == "embedding":
        if not split_sp or fw.sp_edge_gathers:
            return n * allreduce_s(hidden, tp, link), 0.0
        positions = whole_params(layer) > 0  # GPT's learned table: all-reduce, local split
        fwd = allreduce_s(hidden, tp, link) if positions else reduce_scatter_s(hidden, tp, link)
        return n * fwd, n * allgather_s(hidden, tp, link)
    loss_s = LOSS_ALLREDUCES * allreduce_s(sequences * graph.seq_len * 4.0, tp, link)
    if not split_sp or fw.sp_gathers_before_head:
        return loss_s, n * allreduce_s(hidden, tp, link)
    gather = allgather_s(hidden, tp, link)
    regather = 0.0 if fw.sp_head_input_replicated else gather
    return loss_s + n * gather, n * (reduce_scatter_s(hidden, tp, link) + regather)
