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
  2023: the attention core only). None: Megatron's. `sac_policy` names such a policy instead
  (torchtitan's per-op checkpointing), priced from each block's own dimensions: what it
  re-runs and what it keeps (`planner.costing.sac_cost`).
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
- `attention_kernel`: which causal attention kernel the stack runs, whose own published
  throughput (forward and backward, per GPU generation) prices the attention core instead of
  the dense-GEMM efficiency (`cost_models.attention`, with each figure's source): PyTorch
  SDPA's flash backend is FlashAttention-2 (hetplan's runtime, torchtitan); Transformer
  Engine runs cuDNN fused attention on Hopper and FlashAttention-2 on Ampere (Megatron-Core);
  llm-foundry's 2023 benchmarks ran the FlashAttention Triton kernel. Empty: the GEMM rate
  (eager attention, or a stack that does not say which kernel it runs).
- `p2p_blocking`: pipeline sends/receives are synchronous inside the schedule (DeepSpeed's
  `PipelineEngine`: `deepspeed/runtime/pipe/p2p.py` asserts `async_op == False` and calls
  `dist.send`/`dist.recv`, or `broadcast` on a two-rank group before torch 1.8), so each
  transfer occupies both ends instead of overlapping compute. DeepSpeed does partition the
  activation over the tensor-parallel ranks (`is_pipe_partitioned = is_model_parallel`), as
  Megatron's scatter-gather does, so the bytes per rank are the same.
- `p2p_scatter_gather`: each TP rank of a stage sends 1/tp of the boundary activation.
  Megatron-LM's `p2p_communication.py` splits the tensor into 1/tp chunks before the send and
  all-gathers it over the TP group after the receive (`scatter_gather_tensors_in_pipeline`;
  Megatron-Core's sequence-parallel boundary is already split over TP), DeepSpeed partitions
  it (above), torchtitan's TP plan leaves the residual stream sequence-sharded between blocks
  (`RowwiseParallel(output_layouts=Shard(1))`). hetplan's runtime sends the whole, replicated
  boundary from sender TP rank j % tp_sender to each receiving rank j
  (`planner/runtime/topology.py`; with sequence parallelism it is gathered at the stage's
  edge, `planner/runtime/seqpar.py`), so its transfer is priced whole per rank pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cost_models.attention import ATTENTION_KERNELS

__all__ = ["DEFAULT_FRAMEWORK", "FRAMEWORKS",
           "DEEPSPEED", "HETPLAN_RUNTIME", "MEGATRON_CORE", "MEGATRON_STYLE", "SAC_POLICIES",
           "TORCHTITAN", "VOCAB_LOSSES", "Framework", "framework_named",
           "framework_of"]

SAC_POLICIES = ("", "torchtitan-op", "torchtitan-layer")
"""`Framework.sac_policy` values (`planner.costing.sac_cost`); "": Megatron's selective."""


VOCAB_LOSSES = ("torch", "megatron-inplace", "megatron-clone")
"""The cross-entropy implementations `Framework.vocab_loss` names."""


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
    sac_policy: str = ""
    """Under `selective` recompute: the framework's own per-block checkpointing policy, priced
    from each block's dimensions (`planner.costing.sac_cost`): "torchtitan-op" (what it
    re-runs and what it keeps, `cost_models.sac_activations`), "torchtitan-layer" (every
    `sac_every`-th block fully checkpointed); "": Megatron's (or the recompute fractions
    above)."""
    sac_every: int = 2
    """With `sac_policy` "torchtitan-layer": torchtitan's `selective_ac_option = "N"`, every
    N-th transformer block of a rank fully checkpointed, the others keep everything
    (torchtitan/distributed/activation_checkpoint.py `_apply_layer_sac`: a per-process block
    counter, checkpointed when `count % N == 0`); `planner.costing.layer_ac`."""
    attention_flops_share: float = 0.5
    """Share of the graph's (non-causal) attention-core FLOPs the attention kernel computes:
    0.5 for causal flash kernels, which skip the masked upper-triangle blocks (hetplan's
    runtime calls `scaled_dot_product_attention(is_causal=True)`, whose flash and
    memory-efficient CUDA kernels do); 1.0 where the masked s×s scores are materialised."""
    attention_kernel: str = "fa2"
    """The causal attention kernel (`cost_models.attention.ATTENTION_KERNELS`): "fa2" (SDPA's
    flash backend, hetplan's runtime), "cudnn" (TE fused attention on Hopper), "fa3",
    "triton-fa1"; "" prices the attention core at the dense-GEMM rate. A (kernel, GPU
    generation) without a published figure also keeps the GEMM rate."""
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
    p2p_scatter_gather: bool = False
    """Each TP rank of a stage sends 1/tp of the boundary activation (True: Megatron's
    scatter-gather or a sequence-split boundary; DeepSpeed's partitioned activations). False:
    hetplan's runtime, where every receiving TP rank gets the whole tensor
    (`planner.costing.links.p2p_time_s`)."""
    keeps_attention_probs: bool = False
    """The s×s attention probabilities are kept for the backward (eager attention)."""
    attention_dropout: bool = False
    """With `keeps_attention_probs`: attention dropout keeps its mask and dropped copy too."""
    score_passes: tuple[int, int] = (0, 0)
    """With `keeps_attention_probs`: (forward, backward) full reads plus writes of the s×s
    attention scores by the unfused elementwise kernels between the two attention GEMMs
    (scale, mask, softmax, dropout and their gradients), each moving a·s² elements per sequence
    at the activation dtype through HBM; attention dropout adds its 1-byte mask, written
    forward and read backward. The graph's memory traffic is a flash kernel's, which keeps
    the scores on chip, so this is the eager attention's extra time (`stage_cost`)."""
    eager_attention_gemms: bool = False
    """With `keeps_attention_probs`: the attention core's two GEMMs per head (scores Q·Kᵀ and
    P·V, and their four backward GEMMs) are cuBLAS batched GEMMs that read or write the s×s
    scores in HBM, priced by their shapes like the linear GEMMs (memory-bound at a small head
    dimension; `planner.costing.layer_gemms`); False: at the wide GEMM rate."""
    host_dispatch_overlapped: bool = False
    """Host dispatch runs ahead of the GPU (asynchronous launches, nothing synchronises per
    kernel): a pass costs max(GPU work + a small gap per kernel, dispatch of all kernels)
    instead of GPU work + the per-kernel cost (`cost_models.compute._with_launches`)."""
    dp_overlap: bool = False
    """DP gradient reduce(-scatter) and parameter all-gather run during the backward /
    forward in buckets, hidden behind each device's last micro-batch (`estimate`'s
    `overlap_dp`); False: after the pipeline flush."""
    tp_comm_overlap: bool = False
    """TP collectives are split into chunks pipelined with the adjacent GEMMs (Transformer
    Engine userbuffers): only the part longer than the layer pass's GEMM time shows."""
    fused_kernels: bool = False
    """Fused elementwise chains (norm into GEMM, RoPE, SwiGLU / bias-GeLU, bias-dropout-add):
    each block's memory-bound traffic is `cost_models.fusion.fused_traffic_ratio` of the
    eager graph's, from the block's own dimensions (on top of `memory_traffic_scale`), and a
    block keeps for its backward what Transformer Engine's fused modules save, not what eager
    autograd does (`cost_models.te_activations`)."""
    cp_ring_overlap: bool = False
    """Context parallelism's K/V exchange: True, a ring of p2p sends overlapped with the
    attention steps under a causal kernel (Megatron-Core `cp_comm_type="p2p"`, torchtitan's
    `context_parallel`); False, hetplan's runtime (`runtime/context.py`): K and V all-gathered
    before attention, blocking, each query chunk attending causally to the keys before its
    end (no mask: the causal share of the work, as the ring) and the gathered gradient
    all-reduced."""
    zero_beyond_fsdp_runs_as_zero1: bool = True
    """ZeRO-2/3 shard weights and gradients only where FSDP2 can cut them evenly (hetplan's
    runtime, `planner/costing/zero_runs.py`); elsewhere gradients and weights stay whole
    through the backward, as at ZeRO-1. False: the stack shards every stage at the plan's
    ZeRO stage by its own rules (Megatron, torchtitan, DeepSpeed)."""
    max_zero: int = 3
    """The highest ZeRO stage the stack runs alongside its pipeline schedule (the search tries
    no higher): Megatron-LM's distributed optimizer and DeepSpeed's pipeline engine shard
    optimizer state only (DeepSpeed refuses ZeRO-2/3 with pipeline parallelism); torchtitan
    and hetplan's runtime run FSDP2."""
    vocab_loss: str = "torch"
    """The cross-entropy over the (split) logits, which sets the loss's transient bytes
    (`planner.costing.vocab_cost.loss_transient_bytes`): "torch", `F.cross_entropy` on an fp32
    copy, with `loss_parallel` when split (hetplan's runtime `planner/models/chain.py:
    loss_fn`, torchtitan); "megatron-inplace", Megatron's vocab-parallel cross-entropy working
    in place on its fp32 copy (Megatron-Core megatron/core/tensor_parallel/cross_entropy.py:
    `-=`, `torch.exp(out=)`, `div_`); "megatron-clone", Megatron-LM v1.1.5's
    (megatron/mpu/cross_entropy.py: `logits = vocab_parallel_logits.clone()`, `sub_`,
    `exp_logits = logits.exp()`, its caller passing `output.float()`), which holds the
    16-bit logits, their fp32 copy and the clone beside the softmax in the forward."""
    sp_gathers_before_head: bool = True
    """Under sequence parallelism the blocks' sequence-split output is all-gathered before
    the final norm, so the final norm and the LM head run on the whole sequence on every TP
    rank (hetplan's runtime, planner/runtime/seqpar.py). False: the final norm runs
    sequence-parallel, ÷ TP (Megatron's `sequence_parallel` norms; torchtitan's
    `"norm": SequenceParallel()` in parallelize_llama), and the LM head all-gathers its
    input in the forward, reduce-scatters its gradient in the backward (`vocab_cost`)."""
    sp_head_input_replicated: bool = True
    """Under sequence parallelism the LM head's GEMM input is kept whole on every TP rank
    (hetplan's runtime; torchtitan's `"output": ColwiseParallel(input_layouts=Shard(1))`
    redistributes Shard(1) to Replicate before `F.linear`, which saves the replicated input).
    False: Megatron's output layer saves its sequence-split input and all-gathers it again
    in the backward (megatron/core/tensor_parallel/layers.py,
    `LinearWithGradAccumulationAndAsyncCommunication`)."""
    sp_edge_gathers: bool = True
    """Under sequence parallelism a stage's blocks hand on the whole sequence: the split
    output is all-gathered at the end of each stage's SP blocks (hetplan's runtime,
    planner/runtime/seqpar.py), priced once per stage and micro-batch (`stage_cost`). False:
    the boundary stays split (Megatron, torchtitan), and the embedding reduce-scatters its
    output into the split layout (`planner.costing.vocab_cost.vocab_tp_comm_s`)."""
    moe_tp_allreduce_per_expert: bool = True
    """A TP-split MoE block all-reduces each expert's rows and each column-parallel input
    gradient on its own, and under SP the expert branch's output where Megatron-SP
    reduce-scatters (hetplan's runtime, planner/runtime/stage.py; priced message by message
    in `planner.costing.moe_tp_comm`). False: the block's two TP collectives per pass."""
    moe_dispatch_whole_per_tp_rank: bool = True
    """Under expert parallelism every TP rank dispatches all of its sequence's routed token
    copies (hetplan's runtime, planner/runtime/experts.py: each TP rank holds the whole
    sequence; measured in tests/test_moe_a2a_bytes.py). False: each TP rank dispatches its
    1/tp sequence slice (Megatron-Core's MoEAlltoAllTokenDispatcher, "permute → A2A(EP) →
    AG(TP)"; DeepSpeed's MOELayer drops the TP-duplicate tokens before the all-to-all,
    deepspeed/moe/mappings.py `drop_tokens`; priced in `planner.costing.moe_a2a`)."""
    residual_stream_bytes: int = 4
    """Bytes per element of the residual stream, which the norms take as input and (fused
    RMSNorm / LayerNorm) save for their backward: 4 under hetplan's runtime, which trains
    under `torch.autocast` with fp32 weights (planner/runtime/engine.py `Runner(autocast=)`:
    "weights, gradients, optimizer stay fp32"), so the embedding's output and every residual
    add stay fp32 while the GEMMs run in 16 bits; 0: the graph's activation dtype (16-bit
    weights and activations: Megatron, torchtitan's FSDP2 `param_dtype=bfloat16`). Priced
    where the norms' saved inputs are (`layer_cost`), not in the framework-agnostic graph."""
    fp32_params: bool = True
    """Model state as hetplan's runtime holds it (`stage_memory`): fp32 parameters and
    gradients (4 + 4 B), the forward under `torch.autocast` (planner/runtime/engine.py
    `Runner(autocast=)`: "weights, gradients, optimizer stay fp32"). Adam's moments are 8 B; an
    fp32 master copy (4 B) exists only of a ZeRO slice (planner/runtime/zero.py
    `ShardedOptimizer` clones its slice; at ZeRO-0 the parameters are the masters). A 16-bit
    plan's autocast region keeps one 16-bit copy of every GEMM operand weight through the step
    (its cast cache; `Layer.gemm_params`), 2 B each, not per micro-batch. Elements under FSDP2
    (planner/runtime/fsdp.py, ZeRO-2/3 where shards are even) keep fp32 shards (4 + 4 + 8 B ×
    the shard) and gather 16-bit weights (`MixedPrecisionPolicy(param_dtype)`): ZeRO-3 the
    running and prefetched layers' weights and gradients, ZeRO-2 every weight of the stage
    through the step and one layer's gradients; no autocast copies. False: Megatron's mixed
    precision, 2 B 16-bit weights + 2 B gradients + 12 B fp32 master and moments (Rajbhandari
    et al. 2020, §3.1; Megatron, DeepSpeed, torchtitan's FSDP2 as priced here)."""
    fsdp_whole_stage_under_pp: bool = False
    """ZeRO-3 (FSDP2) alongside pipeline parallelism keeps the whole stage's weights gathered
    (16-bit `param_dtype`) and its whole gradients accumulated in fp32 through the step,
    instead of one running and one prefetched layer's: torchtitan's `apply_fsdp`
    ("default" policy: `reshard_after_forward = not pp_enabled`,
    torchtitan/models/llama3/infra/parallelize.py) and torch's pipeline stage
    (torch/distributed/pipelining/stage.py `backward_maybe_with_nosync`: every micro-batch's
    backward runs with `set_reshard_after_backward(False)` and
    `set_requires_gradient_sync(False)`, so FSDP2 keeps the unsharded weights and upcasts
    the unsharded gradients to `reduce_dtype` fp32, `FSDPParam.to_accumulated_grad_if_needed`,
    until the last backward reduce-scatters them). False: hetplan's runtime
    (planner/runtime/fsdp.py reshards after each forward at ZeRO-3), Megatron and DeepSpeed
    (ZeRO-1 at most alongside pipelines)."""
    fp8: str = field(default="", compare=False)
    """How the stack runs fp8 when the plan's precision is fp8 (documentation only: the
    GEMMs then run at the fp8 peak, `cost_models.compute.matmul_dtype`); empty: no fp8 path."""
    sources: tuple[str, ...] = field(default=(), compare=False)
    """Where each behaviour is documented (code or docs of that stack), for `hetplan
    frameworks`."""

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
        if self.sac_policy not in SAC_POLICIES:
            raise ValueError(f"sac_policy must be one of {SAC_POLICIES}, got "
                             f"{self.sac_policy!r}")
        if self.sac_every < 1:
            raise ValueError(f"sac_every must be >= 1, got {self.sac_every}")
        if self.sac_policy and self.recompute_gemm_fraction is not None:
            raise ValueError("give the recompute fractions or sac_policy, not both")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(f"attention_kernel must be one of {ATTENTION_KERNELS}, got "
                             f"{self.attention_kernel!r}")
        if self.attention_dropout and not self.keeps_attention_probs:
            raise ValueError("attention_dropout needs keeps_attention_probs")
        if any(n < 0 for n in self.score_passes) or (any(self.score_passes)
                                                    and not self.keeps_attention_probs):
            raise ValueError("score_passes must be >= 0 and needs keeps_attention_probs")
        if self.vocab_loss not in VOCAB_LOSSES:
            raise ValueError(f"vocab_loss must be one of {VOCAB_LOSSES}, got {self.vocab_loss!r}")
        if self.eager_attention_gemms and not self.keeps_attention_probs:
            raise ValueError("eager_attention_gemms needs keeps_attention_probs")


DEFAULT_FRAMEWORK = Framework()

MEGATRON_STYLE: dict = {"sp_gathers_before_head": False, "sp_head_input_replicated": False,
                        "sp_edge_gathers": False, "moe_tp_allreduce_per_expert": False,
                        "moe_dispatch_whole_per_tp_rank": False,
                        "residual_stream_bytes": 0, "p2p_scatter_gather": True,
                        "fp32_params": False}
"""Where every stack but hetplan's runtime differs from `Framework()`'s defaults in the same
way: 16-bit weights (Megatron's 2 + 2 + 12 B state) and residual stream, Megatron's
sequence-parallel head and edges, the dense block's TP collectives in MoE blocks, 1/tp of the
boundary per p2p rank (each field's own docstring cites the stacks)."""

HETPLAN_RUNTIME = Framework(
    name="hetplan",
    sources=("planner/runtime/stage.py: scaled_dot_product_attention(is_causal=True), "
             "apply_vocab_tp (split only when TP divides the vocabulary)",
             "planner/runtime/grads.py: DP all-reduce after the pipeline flush; one "
             "all-reduce over every tied copy",
             "planner/runtime/topology.py forward_peers / backward_peers: the whole boundary "
             "activation to each receiving TP rank (p2p_scatter_gather False)",
             "eager PyTorch modules, no fused elementwise kernels; per-kernel cost additive "
             "as fitted (docs/cost-model.md §2)",
             "planner/runtime/seqpar.py: under SP the sequence is all-gathered at the end of "
             "each stage's SP blocks, so the final norm and the LM head run whole "
             "(sp_gathers_before_head, sp_head_input_replicated, sp_edge_gathers)",
             "planner/runtime/stage.py: a TP-split MoE block all-reduces expert by expert "
             "(moe_tp_allreduce_per_expert)",
             "planner/runtime/experts.py: every TP rank dispatches all its routed token "
             "copies over the ep-group (moe_dispatch_whole_per_tp_rank)",
             "planner/runtime/engine.py Runner(autocast=): fp32 parameters, gradients and "
             "optimizer, one autocast region per step whose cast cache keeps a 16-bit copy "
             "of each GEMM weight; runtime/zero.py ShardedOptimizer: fp32 master of its "
             "slice only; runtime/fsdp.py: FSDP2 with 16-bit param_dtype (fp32_params)"))
"""hetplan's own runtime (what `hetplan launch` runs): the defaults of `Framework`."""

MEGATRON_CORE = Framework(**MEGATRON_STYLE,
    attention_kernel="te",
    cp_ring_overlap=True, zero_beyond_fsdp_runs_as_zero1=False,
    max_zero=1,
    name="megatron", pads_vocab=True, tied_grad_pairs=True, host_dispatch_overlapped=True,
    vocab_loss="megatron-inplace",
    dp_overlap=True, tp_comm_overlap=True, fused_kernels=True,
    fp8="Transformer Engine delayed-scaling fp8 GEMMs (--fp8-format hybrid), bf16 elsewhere",
    sources=(
        "Megatron-LM megatron/core/transformer (TE TransformerEngine spec): TELayerNormColumn"
        "ParallelLinear fuses the norm into the GEMM, fused RoPE (apply_rotary_pos_emb_fused),"
        " bias_swiglu / bias_gelu fusions, bias_dropout_add fusion",
        "TE DotProductAttention (flash / cuDNN fused attention), attn_mask_type=causal: cuDNN "
        "fused attention on Hopper, FlashAttention-2 on Ampere (attention_kernel 'te')",
        "saved activations: TE LayerNormLinear / Linear keep the norm input and the GEMM "
        "input (its fp8 cast under fp8, transformer_engine/pytorch/module/linear.py), fused "
        "SwiGLU its input (cost_models/te_activations.py)",
        "megatron/core/distributed: DistributedDataParallel overlap_grad_reduce (bucketed "
        "reduce-scatter during backward) and distributed optimizer overlap_param_gather "
        "(all-gather during forward)",
        "--tp-comm-overlap (TE userbuffers: all-gather/reduce-scatter pipelined with the "
        "GEMMs), enabled in NeMo's H100 performance recipes with TP > 1",
        "VocabParallelEmbedding, parallel cross-entropy, vocabulary padded "
        "(--make-vocab-size-divisible-by); embedding group for tied weights",
        "asynchronous CUDA launches: no per-kernel synchronisation in the training loop"))
"""Megatron-core as its performance recipes run it today (NeMo's published tables are made
this way), for teams that plan with hetplan and launch Megatron themselves; `hetplan launch`
always runs hetplan's runtime."""

TORCHTITAN = Framework(**{**MEGATRON_STYLE, "sp_head_input_replicated": True},
    sac_policy="torchtitan-op",
    cp_ring_overlap=True, zero_beyond_fsdp_runs_as_zero1=False,
    fsdp_whole_stage_under_pp=True,
    name="torchtitan", host_dispatch_overlapped=True, dp_overlap=True,
    fp8="torchao Float8Linear (dynamic scaling) on the block linears; needs torch.compile",
    sources=(
        "torchtitan models/llama: F.scaled_dot_product_attention(is_causal=True), whose flash "
        "backend is FlashAttention-2 (attention_kernel 'fa2')",
        "torchtitan parallelize_llama: FSDP2 fully_shard (reduce-scatter of gradients during "
        "backward, prefetched all-gather of parameters during forward)",
        "rowwise embedding / colwise output with loss_parallel: split when TP divides the "
        "vocabulary, no padding",
        "parallelize_llama _apply_ac_to_transformer_block: selective_ac_option 'op' (its "
        "default) saves mm / SDPA outputs except every second mm (sac_policy 'torchtitan-op')",
        "eager modules without torch.compile (no fused elementwise kernels); async TP only "
        "with compile (enable_async_tensor_parallel), not assumed",
        "asynchronous CUDA launches: no per-kernel synchronisation",
        "parallelize.py apply_fsdp: reshard_after_forward = not pp_enabled; torch "
        "pipelining stage.py backward_maybe_with_nosync: no reshard, no gradient sync until "
        "the last backward (fsdp_whole_stage_under_pp)"))
"""PyTorch torchtitan (FSDP2 + TP + PP), bf16 eager. `selective` recompute is its default
per-op checkpointing (`selective_ac_option = 'op'`); its layer option (`selective_ac_option =
"N"`, `hetplan estimate --selective-ac N`) is the same record with
`sac_policy="torchtitan-layer"`, `sac_every=N` (`planner.costing.layer_ac`)."""

DEEPSPEED = Framework(**MEGATRON_STYLE,
    attention_kernel="",
    max_zero=1, zero_beyond_fsdp_runs_as_zero1=False,
    name="deepspeed", attention_flops_share=1.0, pads_vocab=True, tied_grad_pairs=True,
    vocab_loss="megatron-inplace",
    p2p_blocking=True,
    sources=(
        "deepspeed/runtime/pipe/engine.py: PipelineEngine, gradient all-reduce after the "
        "pipeline flush (reduce_gradients at the end of train_batch)",
        "deepspeed/runtime/pipe/p2p.py: synchronous send/recv (async_op=False)",
        "Megatron-DeepSpeed layers: vocab-parallel embedding and logits, masked softmax over "
        "the full s×s scores (FusedScaleMaskSoftmax), tied_comms for tied weights",
        "per-kernel cost additive (docs/cost-model.md §2: BLOOM / MT-NLG runs)"))
"""DeepSpeed's pipeline engine over Megatron-DeepSpeed (BLOOM, MT-NLG)."""

FRAMEWORKS = {"hetplan": HETPLAN_RUNTIME, "megatron": MEGATRON_CORE, "torchtitan": TORCHTITAN,
              "deepspeed": DEEPSPEED}
"""The runtimes `hetplan plan / estimate / simulate / compare / whatif --framework` price."""


def framework_of(plan_predicted: dict | None) -> str:
    """The framework name a plan file was priced for (`predicted.framework`; "hetplan" when
    absent: plans written before the field, or by hand)."""
    return str((plan_predicted or {}).get("framework", "hetplan"))


def framework_named(name: str | None, plan_predicted: dict | None = None) -> Framework:
    """The framework record for a CLI name; without one, the framework a plan file was priced
    for (`framework_of`), else hetplan's. HetplanError (one line) for an unknown name."""
    from planner.errors import HetplanError

    name = framework_of(plan_predicted) if name is None else name  # "" is not a name
    if name not in FRAMEWORKS:
        raise HetplanError(f"--framework {name!r}: use one of {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]
