"""The LayerGraph: the model as a chain of layers, each measured once on the meta device.

Every figure is per sequence of `seq_len` tokens at the training precision, for the whole
(unsharded) layer; the cost model scales by micro-batch size and divides by TP degree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import networkx as nx

__all__ = ["Layer", "LayerGraph", "LayerKind", "Recompute"]

LayerKind = Literal["embedding", "block", "head", "other"]
Recompute = Literal["none", "selective", "full"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """One link of the chain (embedding, transformer block, head, or a user's block)."""

    index: int
    """Position in the chain; plan layer ranges are half-open over these."""
    name: str
    """Module name, e.g. `layers.7`, stable across partitions."""
    kind: LayerKind
    params: int
    """Trainable parameters (a tied embedding counts once, where it is first used)."""
    fwd_flops: float
    """Forward FLOPs (2 per multiply-add), matmuls and attention included."""
    bwd_act_flops: float
    """Backward FLOPs that produce activation gradients (dgrad)."""
    bwd_weight_flops: float
    """Backward FLOPs that produce weight gradients (wgrad)."""
    fwd_matmul_flops: float
    """The part of `fwd_flops` spent in GEMMs / attention (tensor-core work)."""
    fwd_memory_bytes: float
    """HBM bytes moved by the forward's memory-bound ops (norms, softmax, elementwise)."""
    activation_bytes: float
    """Bytes saved for backward with no recomputation."""
    activation_bytes_selective: float
    """Bytes saved with selective recomputation (attention core recomputed, Korthikanti §4)."""
    activation_bytes_full: float
    """Bytes saved with full recomputation (only the layer input is kept)."""
    output_bytes: float
    """Bytes of the tensor this layer hands to the next (pipeline p2p message)."""
    tp_allreduce_bytes: float
    """Bytes each Megatron-TP all-reduce in the forward carries (0 if the layer is not split)."""
    tp_allreduces_fwd: int
    """All-reduces per forward under Megatron TP (2 for a block); backward has as many."""
    max_tp: int
    """Largest TP degree the layer's shapes allow (heads, KV heads, FFN width divisibility)."""
    matmul_dim: int
    """Representative GEMM inner size (hidden size) for the size-dependent GEMM efficiency."""
    fwd_attention_flops: float = 0.0
    """The attention-core part of `fwd_matmul_flops` (q·kᵀ and p·v), counted non-causal;
    a causal fused kernel does about half of it."""
    tied_params: int = 0
    """Parameters this layer uses that another layer (`tied_to`) counts: a tied LM head's
    embedding matrix. A stage holding this layer but not `tied_to` keeps its own copy (weights,
    gradients, optimizer state), and the copies' gradients are all-reduced together."""
    tied_to: int = -1
    """Chain index of the layer that counts `tied_params` (-1: no tie)."""
    tp_dims: tuple[int, ...] = ()
    """Sizes a TP degree must divide (heads, KV heads, FFN width); empty: any degree up to
    `max_tp` (the embedding and head split a vocabulary Megatron-style, padded)."""
    num_experts: int = 0
    """Routed experts of a mixture-of-experts block (0: dense)."""
    experts_per_token: int = 0
    """Top-k of the router: routed copies of each token."""
    expert_params: int = 0
    """The part of `params` in routed experts: what expert parallelism divides."""
    fwd_expert_flops: float = 0.0
    """The part of `fwd_matmul_flops` in routed experts (top-k tokens, balanced routing)."""
    a2a_bytes: float = 0.0
    """Bytes of the routed token copies per sequence (s·k·h at the activation dtype): what one
    all-to-all (dispatch or combine) moves under expert parallelism, before the share that
    stays on its own GPU."""
    vocab_size: int = 0
    """Embedding: rows of its token table; head: its logits' width; 0 elsewhere or unknown.
    hetplan's runtime splits them over TP only when the degree divides it (no padding)."""
    gemm_params: int | None = None
    """Parameters the layer's GEMMs take as an operand, its own and a tied weight it uses
    (`tied_params`): the 2-D weights of the attention / MLP / expert projections and the LM
    head, not norms nor an embedding table only looked up. Under `torch.autocast` each is cast
    to 16 bits once per autocast region (`planner.costing.stage_cost`). Measured with the rest
    (`planner.graph.measure`); None (graphs written before the field): all of a block's
    parameters, the head's vocabulary table and tied weight, none of the embedding's."""

    def allows_tp(self, tp: int) -> bool:
        """Whether a tensor-parallel degree `tp` splits this layer evenly."""
        return 1 <= tp <= self.max_tp and all(dim % tp == 0 for dim in self.tp_dims)

    @property
    def bwd_flops(self) -> float:
        return self.bwd_act_flops + self.bwd_weight_flops

    def saved_bytes(self, recompute: Recompute) -> float:
        """Activation bytes held per sequence between forward and backward under `recompute`."""
        return {
            "none": self.activation_bytes,
            "selective": self.activation_bytes_selective,
            "full": self.activation_bytes_full,
        }[recompute]

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "kind": self.kind,
            "params": self.params,
            "fwd_flops": self.fwd_flops,
            "bwd_flops": self.bwd_flops,
            "bwd_act_flops": self.bwd_act_flops,
            "bwd_weight_flops": self.bwd_weight_flops,
            "activation_bytes": self.activation_bytes,
            "activation_bytes_selective": self.activation_bytes_selective,
            "activation_bytes_full": self.activation_bytes_full,
            "output_bytes": self.output_bytes,
            "tp_allreduce_bytes": self.tp_allreduce_bytes,
            "tp_allreduces_fwd": self.tp_allreduces_fwd,
            "max_tp": self.max_tp,
            "matmul_dim": self.matmul_dim,
            "fwd_matmul_flops": self.fwd_matmul_flops,
            "fwd_attention_flops": self.fwd_attention_flops,
            "fwd_memory_bytes": self.fwd_memory_bytes,
            "tp_dims": list(self.tp_dims),
            "tied_params": self.tied_params,
            "tied_to": self.tied_to,
            "vocab_size": self.vocab_size,
            **({"gemm_params": self.gemm_params} if self.gemm_params is not None else {}),
            **({"num_experts": self.num_experts, "experts_per_token": self.experts_per_token,
                "expert_params": self.expert_params, "fwd_expert_flops": self.fwd_expert_flops,
                "a2a_bytes": self.a2a_bytes} if self.num_experts else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layer:
        """Inverse of `to_dict` (the derived `bwd_flops` is ignored)."""
        fields = {k: v for k, v in data.items() if k != "bwd_flops"}
        fields["tp_dims"] = tuple(fields.get("tp_dims", ()))
        return cls(**fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerGraph:
    """The chain of layers, plus the op-level networkx graph it was cut from."""

    name: str
    seq_len: int
    dtype_bytes: int
    """Bytes per element at the training precision (2 for bf16/fp16, 4 for fp32)."""
    layers: tuple[Layer, ...]
    op_graph: nx.DiGraph = field(default_factory=nx.DiGraph, compare=False, repr=False)
    """Op-level graph: nodes are ops (attr `layer`: the chain index), edges are tensors."""

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def active_params(self) -> float:
        """Parameters one token passes through: routed experts count top-k of them."""
        return sum(layer.params - layer.expert_params
                   + layer.expert_params * layer.experts_per_token / max(layer.num_experts, 1)
                   for layer in self.layers)

    @property
    def fwd_flops(self) -> float:
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops(self) -> float:
        return sum(layer.bwd_flops for layer in self.layers)

    @property
    def train_flops(self) -> float:
        """Forward + backward FLOPs per sequence, no recomputation (the MFU numerator)."""
        return self.fwd_flops + self.bwd_flops

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seq_len": self.seq_len,
            "params": self.params,
            "fwd_flops": self.fwd_flops,
            "bwd_flops": self.bwd_flops,
            "activation_bytes": sum(layer.activation_bytes for layer in self.layers),
            "dtype_bytes": self.dtype_bytes,
            "layers": [layer.to_dict() for layer in self.layers],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerGraph:
        """Inverse of `to_dict` (the op graph is not serialised and comes back empty)."""
        return cls(
            name=data["name"],
            seq_len=data["seq_len"],
            dtype_bytes=data["dtype_bytes"],
            layers=tuple(Layer.from_dict(d) for d in data["layers"]),
        )
