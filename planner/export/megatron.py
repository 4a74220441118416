"""Megatron-LM command-line arguments for a uniform plan.

Flag names as Megatron-LM's `megatron/training/arguments.py` defines them (checked against the
NVIDIA/Megatron-LM repository, 2025): `--tensor-model-parallel-size`,
`--pipeline-model-parallel-size`, `--num-layers-per-virtual-pipeline-stage`,
`--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers` (uneven first and
last stages, the middle ones even; only without virtual stages), and
`--pipeline-model-parallel-layout` (any contiguous split, e.g. "Et*5|t*6|t*6L": E embedding,
t a transformer layer, L the output layer and loss, | between chunks in chunk order;
`megatron/core/transformer/pipeline_parallel_layer_layout.py`). At most one of the virtual
stage flags and the layout may be given (`validate_args`).
"""

from __future__ import annotations

from typing import Any

from planner.export.uniform import UniformShape

__all__ = ["megatron_args", "pipeline_layout"]


def pipeline_layout(shape: UniformShape) -> str:
    """The `--pipeline-model-parallel-layout` string of the plan's chunks."""
    parts = []
    for (start, end), k in zip(shape.chunk_layers, shape.blocks_per_chunk(), strict=True):
        text = "E" if start == 0 else ""
        text += "" if k == 0 else ("t" if k == 1 else f"t*{k}")
        text += "L" if end == shape.num_layers else ""
        parts.append(text)
    return "|".join(parts)


def _split_args(shape: UniformShape) -> list[tuple[str, Any]]:
    blocks = shape.blocks_per_chunk()
    if len(set(blocks)) == 1:
        if shape.virtual_stages > 1:
            return [("--num-layers-per-virtual-pipeline-stage", blocks[0])]
        return []
    middle = blocks[1:-1]
    if (shape.virtual_stages == 1 and len(set(middle)) <= 1 and blocks[0] > 0
            and blocks[-1] > 0):
        return [("--decoder-first-pipeline-num-layers", blocks[0]),
                ("--decoder-last-pipeline-num-layers", blocks[-1])]
    return [("--pipeline-model-parallel-layout", f'"{pipeline_layout(shape)}"')]


def _model_args(model: dict[str, Any]) -> list[tuple[str, Any]]:
    args: list[tuple[str, Any]] = [
        ("--num-layers", model["num_layers"]), ("--hidden-size", model["hidden_size"]),
        ("--num-attention-heads", model["num_attention_heads"]),
        ("--ffn-hidden-size", model["ffn_hidden_size"]), ("--seq-length", model["seq_len"]),
        ("--max-position-embeddings", model["seq_len"]),
    ]
    if model["architecture"] == "llama":
        args += [("--swiglu", None), ("--normalization", "RMSNorm"),
                 ("--position-embedding-type", "rope"), ("--disable-bias-linear", None)]
    kv = model.get("num_kv_heads", model["num_attention_heads"])
    if kv != model["num_attention_heads"]:
        args += [("--group-query-attention", None), ("--num-query-groups", kv)]
    if not model.get("tie_embeddings", model["architecture"] == "gpt"):
        args.append(("--untie-embeddings-and-output-weights", None))
    args += _moe_args(model)
    precision = model.get("training", {}).get("precision", "bf16")
    if precision in ("bf16", "fp16"):
        args.append((f"--{precision}", None))
    return args


def _moe_args(model: dict[str, Any]) -> list[tuple[str, Any]]:
    """Mixture-of-experts shape (Megatron-LM `_add_moe_args`): without these a routed model
    would launch as a dense one."""
    experts = model.get("num_experts") or 0
    if not experts:
        return []
    args: list[tuple[str, Any]] = [
        ("--num-experts", experts), ("--moe-router-topk", model["num_experts_per_tok"]),
        ("--moe-ffn-hidden-size", model.get("moe_ffn_hidden_size") or model["ffn_hidden_size"])]
    shared = model.get("shared_expert_ffn_hidden_size") or 0
    if shared:
        args.append(("--moe-shared-expert-intermediate-size", shared))
    dense = int(model.get("first_dense_layers") or 0)
    if dense:
        args.append(("--moe-layer-freq",
                     f'"([0]*{dense}+[1]*{model["num_layers"] - dense})"'))
    if model.get("norm_topk_prob") is False:
        # Softmax over all experts, then top-k (unrenormalised); Megatron's default takes the
        # top-k logits first and softmaxes those, which renormalises.
        args.append(("--moe-router-pre-softmax", None))
    return args


def sequence_parallel_forced(shape: UniformShape) -> bool:
    """Whether Megatron needs --sequence-parallel although the plan was priced without it:
    Megatron-Core's TransformerConfig raises "When using expert parallelism and tensor
    parallelism, sequence parallelism must be used" (expert_model_parallel_size > 1 and
    tensor_model_parallel_size > 1)."""
    return shape.tp > 1 and shape.ep > 1 and not shape.sequence_parallel


def megatron_args(shape: UniformShape, model: dict[str, Any]) -> list[tuple[str, Any]]:
    """(flag, value or None) pairs, model shape first, then the parallel layout."""
    args = _model_args(model)
    args += [("--tensor-model-parallel-size", shape.tp),
             ("--pipeline-model-parallel-size", shape.pp)]
    if shape.cp > 1:
        args.append(("--context-parallel-size", shape.cp))
    if shape.ep > 1:
        args.append(("--expert-model-parallel-size", shape.ep))
    args += _split_args(shape)
    args += [("--micro-batch-size", shape.micro_batch_size),
             ("--global-batch-size", shape.global_batch_size)]
    if shape.recompute == "selective":
        args.append(("--recompute-activations", None))  # = --recompute-granularity selective
    elif shape.recompute == "full":
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    if shape.sequence_parallel or sequence_parallel_forced(shape):
        args.append(("--sequence-parallel", None))
    if shape.zero >= 1:
        args.append(("--use-distributed-optimizer", None))
    return args


def megatron_text(shape: UniformShape, model: dict[str, Any], notes: list[str]) -> str:
    lines = [f"# {n}" for n in notes]
    args = megatron_args(shape, model)
    for i, (flag, value) in enumerate(args):
        tail = " \\" if i < len(args) - 1 else ""
        lines.append(f"{flag}{'' if value is None else f' {value}'}{tail}")
    return "\n".join(lines) + "\n"
