"""Model and training specs: what a model YAML (or a HuggingFace config.json) says.

Plain validated data (pydantic, frozen, unknown fields rejected). Loading and error
wording live in `planner.graph.load_spec`; this module only defines and checks fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import SpecError
from planner.input_files import short
from planner.limits import (
    MAX_EXPERTS,
    MAX_FFN,
    MAX_GLOBAL_BATCH,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_VOCAB,
    limit_text,
)

__all__ = [
    "Architecture",
    "ModelSpec",
    "Precision",
    "TrainingSpec",
    "default_ffn_hidden_size",
    "spec_error_from_validation",
]

Architecture = Literal["gpt", "llama"]
Precision = Literal["bf16", "fp16", "fp32"]

# Strict: a YAML `hidden_size: "4096"` or `4096.5` is a mistake worth one clear line.
_PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]

# Whole numbers with an upper bound (planner.limits says why each).
_Layers = Annotated[int, Field(strict=True, ge=1, le=MAX_LAYERS)]
_Width = Annotated[int, Field(strict=True, ge=1, le=MAX_HIDDEN)]
_Ffn = Annotated[int, Field(strict=True, ge=1, le=MAX_FFN)]
_Vocab = Annotated[int, Field(strict=True, ge=1, le=MAX_VOCAB)]
_SeqLen = Annotated[int, Field(strict=True, ge=1, le=MAX_SEQ_LEN)]
_Batch = Annotated[int, Field(strict=True, ge=1, le=MAX_GLOBAL_BATCH)]
_Experts = Annotated[int, Field(strict=True, ge=0, le=MAX_EXPERTS)]
_OptFfn = Annotated[int, Field(strict=True, ge=0, le=MAX_FFN)]
_MAX_SCORES = 2**58
"""heads × seq_len² of one sequence's attention scores (× 8 bytes stays below 2^63)."""
_OptLayers = Annotated[int, Field(strict=True, ge=0, le=MAX_LAYERS)]


_DEFAULTED = ("num_kv_heads", "ffn_hidden_size", "tie_embeddings", "moe_ffn_hidden_size")
_MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_ffn_hidden_size",
               "shared_expert_ffn_hidden_size", "shared_expert_gate", "first_dense_layers",
               "norm_topk_prob")
_MOE_DEFAULTS = {"num_experts_per_tok": 0, "moe_ffn_hidden_size": None,
                 "shared_expert_ffn_hidden_size": 0, "shared_expert_gate": False,
                 "first_dense_layers": 0, "norm_topk_prob": True}


class _FieldError(ValueError):
    """A cross-field check that failed; carries the field to name in the message."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class TrainingSpec(BaseModel):
    """How the model is trained (CLI flags override these)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    global_batch_size: _Batch | None = None
    """Sequences per iteration; None means the command line must give it."""
    precision: Precision = "bf16"
    """Compute precision of weights and activations (Adam states stay fp32)."""
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"


def default_ffn_hidden_size(architecture: str, hidden_size: int) -> int:
    """GPT: 4h. Llama: Meta's rule, 2/3 of 4h rounded up to a multiple of 256."""
    if architecture == "llama":
        ffn = int(2 * 4 * hidden_size / 3)
        return 256 * ((ffn + 255) // 256)
    return 4 * hidden_size


class ModelSpec(BaseModel):
    """A decoder-only transformer's shape (see docs: planner/configs/models/*.yaml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1)]
    architecture: Architecture
    """gpt: LayerNorm, GELU MLP, learned positions. llama: RMSNorm, SwiGLU, RoPE, GQA."""
    hidden_size: _Width
    num_layers: _Layers
    num_attention_heads: _Width
    num_kv_heads: _Width
    """Key/value heads (GQA); defaults to num_attention_heads."""
    ffn_hidden_size: _Ffn
    """MLP inner width; defaults to 4h (gpt) or Meta's 8h/3 rule (llama)."""
    vocab_size: _Vocab
    seq_len: _SeqLen
    """Training sequence length in tokens (every per-sequence figure uses it)."""
    tie_embeddings: bool
    """LM head shares the embedding weight; defaults true for gpt, false for llama."""
    norm_eps: _PosFloat = 1e-5
    rope_theta: _PosFloat = 10000.0
    """RoPE base (llama only)."""
    num_experts: _Experts = 0
    """Routed experts per mixture-of-experts layer (llama only); 0: every MLP is dense."""
    num_experts_per_tok: _Experts = 0
    """Top-k: experts each token is routed to (1..num_experts when num_experts > 0)."""
    moe_ffn_hidden_size: _Ffn | None = None
    """Inner width of one routed expert (SwiGLU); defaults to ffn_hidden_size."""
    shared_expert_ffn_hidden_size: _OptFfn = 0
    """Inner width of the always-on shared expert(s), summed (DeepSeek-MoE, Qwen-MoE); 0: none."""
    shared_expert_gate: bool = False
    """The shared expert's output is scaled by sigmoid(x·w) (Qwen-MoE)."""
    first_dense_layers: _OptLayers = 0
    """The first k blocks keep a dense MLP of ffn_hidden_size (DeepSeek's first_k_dense_replace)."""
    norm_topk_prob: bool = True
    """Renormalise the top-k routing weights to sum to 1 (Mixtral); false: raw softmax (Qwen)."""
    source: str = ""
    """Where the numbers come from (paper, model card, config file)."""
    training: TrainingSpec = TrainingSpec()

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # None (e.g. `replace(ffn_hidden_size=None)`) means "use the default".
        data = {k: v for k, v in data.items() if not (v is None and k in _DEFAULTED)}
        arch = data.get("architecture")
        if "num_attention_heads" in data:
            data.setdefault("num_kv_heads", data["num_attention_heads"])
        hidden = data.get("hidden_size")
        if "ffn_hidden_size" not in data and isinstance(hidden, int) and arch in ("gpt", "llama"):
            data["ffn_hidden_size"] = default_ffn_hidden_size(arch, hidden)
        if data.get("num_experts") and "moe_ffn_hidden_size" not in data:
            data["moe_ffn_hidden_size"] = data.get("ffn_hidden_size")
        if "tie_embeddings" not in data and arch in ("gpt", "llama"):
            data["tie_embeddings"] = arch == "gpt"
        return data

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        h, a, kv = self.hidden_size, self.num_attention_heads, self.num_kv_heads
        if h % a:
            raise _FieldError(
                "num_attention_heads",
                f"{a} does not divide hidden_size {h}; pick a head count that divides it "
                f"(e.g. {_nearest_divisor(h, a)})",
            )
        if a % kv:
            raise _FieldError(
                "num_kv_heads",
                f"{kv} does not divide num_attention_heads {a}; each KV head must serve a "
                f"whole group of query heads (e.g. {_nearest_divisor(a, kv)})",
            )
        scores = a * self.seq_len**2
        if scores > _MAX_SCORES:
            # The extraction runs one block on the meta device; torch refuses a tensor whose
            # byte size overflows int64, and the attention scores are the largest one.
            raise _FieldError(
                "seq_len",
                f"{self.seq_len:,} tokens × {a:,} heads make an attention score tensor of "
                f"{a:,} × {self.seq_len:,}² = {scores:.3g} elements, above the 2^58 a tensor "
                "size can hold; lower seq_len or num_attention_heads",
            )
        if self.architecture == "llama" and (h // a) % 2:
            raise _FieldError(
                "num_attention_heads",
                f"head size hidden_size/num_attention_heads = {h // a} is odd; RoPE needs "
                "an even head size",
            )
        self._check_moe()
        return self

    def _check_moe(self) -> None:
        e, k = self.num_experts, self.num_experts_per_tok
        if e == 0:
            extra = [f for f in _MOE_FIELDS[1:] if getattr(self, f) != _MOE_DEFAULTS[f]]
            if extra:
                raise _FieldError(extra[0], "set for a dense model; set num_experts > 0 for a "
                                  "mixture-of-experts model, or remove it")
            return
        if self.architecture != "llama":
            raise _FieldError("num_experts", "mixture-of-experts layers are modelled for the "
                              "llama architecture (SwiGLU experts) only; use architecture: llama")
        if not 1 <= k <= e:
            raise _FieldError("num_experts_per_tok", f"{k} must be between 1 and num_experts "
                              f"({e}); it is the top-k of the router")
        if self.first_dense_layers >= self.num_layers:
            raise _FieldError("first_dense_layers", f"{self.first_dense_layers} leaves no "
                              f"mixture-of-experts block among {self.num_layers} layers; "
                              "lower it or set num_experts: 0")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_block(self, block: int) -> bool:
        """Whether block `block` (0-based, not the chain index) has routed experts."""
        return self.num_experts > 0 and block >= self.first_dense_layers

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_chain_layers(self) -> int:
        """Layers of the chain: embedding + blocks + head."""
        return self.num_layers + 2

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict with every field (for embedding into plans); a dense model
        leaves out the mixture-of-experts fields (all at their defaults)."""
        data = self.model_dump(mode="json")
        if not self.is_moe:
            for f in _MOE_FIELDS:
                data.pop(f, None)
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "model") -> ModelSpec:
        """Validate a dict (e.g. a plan's `model`); errors name `where` and the field."""
        if not isinstance(data, dict):
            raise SpecError(where, None, f"expected a mapping of model fields, got {_kind(data)}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_error_from_validation(exc, where) from None

    def replace(self, **changes: Any) -> ModelSpec:
        """A validated copy with some fields changed (e.g. `seq_len`, `num_layers`).

        Pass None for num_kv_heads / ffn_hidden_size / tie_embeddings to re-derive them.
        """
        data = self.to_dict()
        data.update(changes)
        return ModelSpec.from_dict(data, where=f"{self.name} (replace)")


def _nearest_divisor(n: int, near: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - near), d))


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    names = {dict: "a mapping", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


_HINTS = {
    "missing": "missing; add it",
    "extra_forbidden": "unknown field; remove it or check its spelling",
}


def spec_error_from_validation(exc: ValidationError, where: str) -> SpecError:
    """The first pydantic error as one SpecError line: file, field, what is wrong."""
    err = exc.errors(include_url=False)[0]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        return SpecError(where, ctx_error.field, str(ctx_error))
    field = ".".join(str(p) for p in err["loc"]) or None
    kind = err["type"]
    if kind in _HINTS:
        message = _HINTS[kind]
        if kind == "extra_forbidden":
            allowed = _allowed_fields(field)
            message += f" (allowed: {', '.join(allowed)})"
        return SpecError(where, field, message)
    if kind == "less_than_equal":
        return SpecError(where, field, f"{short(err.get('input'))} is above hetplan's limit of "
                         f"{limit_text(err['ctx']['le'])}; real models stay far below it "
                         "(check for a typo)")
    message = err["msg"]
    if "input" in err:
        message += f" (got {short(err['input'])})"
    return SpecError(where, field, message)


def _allowed_fields(field: str | None) -> list[str]:
    if field and field.startswith("training."):
        return list(TrainingSpec.model_fields)
    return list(ModelSpec.model_fields)
