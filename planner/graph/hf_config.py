"""Translate a HuggingFace `config.json` into ModelSpec fields.

Supported `model_type`s: llama, mistral, qwen2, and the mixture-of-experts mixtral,
qwen2_moe and deepseek (DeepSeek-MoE) (all: RMSNorm, SwiGLU, RoPE, GQA → our
`llama`), gpt2, gpt_neo, opt (→ our `gpt`). What our modules do not model is dropped
and said so in `source`: Qwen2's q/k/v biases, OPT's narrower word-embedding projection
(`word_embed_proj_dim`), post-norm and ReLU, GPT-Neo's local attention.

A config.json gives the longest context the model supports (`max_position_embeddings`), not
the length it is trained at; `seq_len` is chosen by `planner.graph.seq_len.choose_seq_len`
(the caller's, else a default of at most 4096 tokens, with a notice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import SpecError

__all__ = ["from_hf_config", "hf_max_positions", "looks_like_hf_config"]

_LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "deepseek")
_MOE = ("mixtral", "qwen2_moe", "deepseek")


@dataclass(frozen=True)
class _GptKeys:
    """Where one GPT-style model_type keeps each field (they all mean the same thing)."""

    hidden: str
    layers: str
    heads: str
    ffn: str
    ffn_required: bool  # else an absent/null/0 ffn field means ModelSpec's default
    seq_len: str
    norm_eps: str | None  # None: the config has no epsilon; ModelSpec's default applies


_GPT_LIKE = {
    "gpt2": _GptKeys("n_embd", "n_layer", "n_head", "n_inner", False, "n_positions",
                     "layer_norm_epsilon"),
    "gpt_neo": _GptKeys("hidden_size", "num_layers", "num_heads", "intermediate_size", False,
                        "max_position_embeddings", "layer_norm_epsilon"),
    "opt": _GptKeys("hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim", True,
                    "max_position_embeddings", None),
}


def looks_like_hf_config(data: dict[str, Any]) -> bool:
    return "architecture" not in data and ("model_type" in data or "architectures" in data)


def hf_max_positions(data: dict[str, Any], where: str) -> Any:
    """The config's longest supported context in tokens (`max_position_embeddings`, GPT-2's
    `n_positions`), as written (ModelSpec validates it once it becomes a seq_len)."""
    model_type = data.get("model_type")
    key = _GPT_LIKE[model_type].seq_len if model_type in _GPT_LIKE else "max_position_embeddings"
    return _need(data, key, where)


def _need(data: dict[str, Any], key: str, where: str) -> Any:
    if key not in data or data[key] is None:
        raise SpecError(where, key, "missing from the HuggingFace config; add it")
    return data[key]


def _flag(data: dict[str, Any], key: str, default: bool, where: str) -> bool:
    """A true/false field (absent or null: `default`). bool("false") is True: a quoted or
    numeric value would be read the opposite way, so it is refused."""
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(where, key, f"{value!r:.40} is not true or false; write it as one")
    return value


def _shared_experts(data: dict[str, Any], where: str) -> int:
    """DeepSeek's `n_shared_experts` (absent or null: none), a whole count: it multiplies
    `moe_intermediate_size`, where a text or a boolean would repeat or pass for 1."""
    value = data.get("n_shared_experts")
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise SpecError(where, "n_shared_experts", f"{value!r:.40} is not a whole number of "
                        "shared experts (0 or more)")
    return value


def _gpt_ffn(data: dict[str, Any], keys: _GptKeys, where: str) -> Any:
    if keys.ffn_required:
        return _need(data, keys.ffn, where)
    return data.get(keys.ffn) or None  # None: ModelSpec fills its gpt default, 4 × hidden


def _moe_fields(data: dict[str, Any], model_type: str, where: str) -> dict[str, Any]:
    """Mixture-of-experts fields: Mixtral (num_local_experts), Qwen-MoE (num_experts, a
    sigmoid-gated shared expert), DeepSeek-MoE (n_routed_experts, n_shared_experts of
    moe_intermediate_size each, the first first_k_dense_replace blocks dense)."""
    k = _need(data, "num_experts_per_tok", where)
    if model_type == "mixtral":
        return {"num_experts": _need(data, "num_local_experts", where), "num_experts_per_tok": k,
                "norm_topk_prob": True}
    width = _need(data, "moe_intermediate_size", where)
    if model_type == "qwen2_moe":
        if data.get("decoder_sparse_step", 1) != 1 or data.get("mlp_only_layers"):
            raise SpecError(where, "decoder_sparse_step", "only every block being a "
                            "mixture-of-experts block is modelled (decoder_sparse_step 1, "
                            "mlp_only_layers empty)")
        shared = data.get("shared_expert_intermediate_size") or 0
        return {"num_experts": _need(data, "num_experts", where), "num_experts_per_tok": k,
                "moe_ffn_hidden_size": width, "shared_expert_ffn_hidden_size": shared,
                "shared_expert_gate": bool(shared),
                "norm_topk_prob": _flag(data, "norm_topk_prob", False, where)}
    if data.get("moe_layer_freq", 1) != 1:
        raise SpecError(where, "moe_layer_freq", "only every block after first_k_dense_replace "
                        "being a mixture-of-experts block is modelled (moe_layer_freq 1)")
    return {"num_experts": _need(data, "n_routed_experts", where), "num_experts_per_tok": k,
            "moe_ffn_hidden_size": width,
            "shared_expert_ffn_hidden_size": width * _shared_experts(data, where),
            "first_dense_layers": data.get("first_k_dense_replace", 0) or 0,
            "norm_topk_prob": _flag(data, "norm_topk_prob", False, where)}


def from_hf_config(data: dict[str, Any], where: str, *, default_name: str) -> dict[str, Any]:
    """ModelSpec fields (a dict, validated later) for a HuggingFace config, all but
    `seq_len` (see `hf_max_positions`)."""
    model_type = data.get("model_type")
    name = default_name
    if isinstance(data.get("_name_or_path"), str):
        # `org/Model` -> `Model`; a local path such as "./" or "/" names nothing.
        tail = data["_name_or_path"].rstrip("/").rsplit("/", 1)[-1]
        if tail.strip(". "):
            name = tail
    note = f"HuggingFace config.json ({where}, model_type {model_type})"
    if model_type in _LLAMA_LIKE:
        heads = _need(data, "num_attention_heads", where)
        out = {
            "architecture": "llama",
            "hidden_size": _need(data, "hidden_size", where),
            "num_layers": _need(data, "num_hidden_layers", where),
            "num_attention_heads": heads,
            # None: ModelSpec's default, one KV head per attention head (no GQA).
            "num_kv_heads": data.get("num_key_value_heads"),
            "ffn_hidden_size": _need(data, "intermediate_size", where),
            "vocab_size": _need(data, "vocab_size", where),
            "tie_embeddings": _flag(data, "tie_word_embeddings", False, where),
            "norm_eps": data.get("rms_norm_eps", 1e-6),
            "rope_theta": data.get("rope_theta", 10000.0),
        }
        if model_type in ("qwen2", "qwen2_moe"):
            note += "; q/k/v biases not modelled"
        if model_type in _MOE:
            out.update(_moe_fields(data, model_type, where))
    elif model_type in _GPT_LIKE:
        keys = _GPT_LIKE[model_type]
        hidden = _need(data, keys.hidden, where)
        out = {
            "architecture": "gpt",
            "hidden_size": hidden,
            "num_layers": _need(data, keys.layers, where),
            "num_attention_heads": _need(data, keys.heads, where),
            "ffn_hidden_size": _gpt_ffn(data, keys, where),
            "vocab_size": _need(data, "vocab_size", where),
            "tie_embeddings": _flag(data, "tie_word_embeddings", True, where),
        }
        if keys.norm_eps is not None:
            out["norm_eps"] = data.get(keys.norm_eps, 1e-5)
        if model_type == "gpt_neo":
            note += "; local attention layers counted as global"
        proj = data.get("word_embed_proj_dim")
        if model_type == "opt" and proj not in (None, hidden):
            note += f"; word_embed_proj_dim {proj} modelled as hidden_size {hidden}"
    else:
        raise SpecError(where, "model_type", f"unsupported HuggingFace model_type {model_type!r}; "
                        f"supported: {', '.join([*_LLAMA_LIKE, *_GPT_LIKE])}")
    return {"name": name, **{k: v for k, v in out.items() if v is not None}, "source": note}
