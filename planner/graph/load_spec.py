"""Load a ModelSpec from a zoo name, a model YAML, or a HuggingFace config.json.

Every user mistake becomes a SpecError naming the file and field, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.graph.hf_config import from_hf_config, hf_max_positions, looks_like_hf_config
from planner.graph.seq_len import Notice, check_seq_len, choose_seq_len, print_notice
from planner.graph.spec import ModelSpec
from planner.input_files import load_json, load_yaml_mapping

__all__ = ["MODELS_DIR", "load_model_spec", "zoo_names"]

# The zoo is package data (planner/configs/models), so a non-editable install keeps it.
MODELS_DIR = Path(__file__).resolve().parents[1] / "configs" / "models"


def zoo_names() -> list[str]:
    """Names of the bundled models (planner/configs/models/*.yaml), sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def _resolve(path_or_name: str | Path) -> Path:
    path = Path(path_or_name)
    if path.is_file():
        return path
    text = str(path_or_name)
    bare = "/" not in text and "\\" not in text
    if bare and (MODELS_DIR / f"{text}.yaml").is_file():
        return MODELS_DIR / f"{text}.yaml"
    if bare and path.suffix not in (".yaml", ".yml", ".json"):
        raise SpecError(text, None, f"no such model file or bundled model; bundled: "
                        f"{', '.join(zoo_names())}")
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    raise SpecError(text, None, "no such file (give a model YAML, a HuggingFace config.json, "
                    "or a bundled name such as llama3-8b)")


def _parse(path: Path) -> Any:
    where = str(path)
    if path.suffix == ".json":
        return load_json(path, where, what="model")
    return load_yaml_mapping(path, where, what="model",
                             example="planner/configs/models/llama3-8b.yaml")


def _hf_default_name(path: Path, data: dict[str, Any]) -> str:
    """A config.json is named after its folder (`Qwen2.5-7B/config.json`), resolved so that
    `config.json` and `./config.json` get one too; any other file after its stem; never empty."""
    if path.name != "config.json":
        return path.stem
    return path.resolve().parent.name or str(data.get("model_type") or "model")


def load_model_spec(path_or_name: str | Path, *, seq_len: int | None = None,
                    notice: Notice | None = None) -> ModelSpec:
    """A validated ModelSpec from a bundled name (`llama3-8b`), a YAML, or a config.json.

    `seq_len` overrides the file's training sequence length. A config.json has none of its
    own: without `seq_len` it gets `planner.graph.seq_len.choose_seq_len`'s default and a
    one-line notice through `notice` (default: stderr).
    """
    if seq_len is not None:
        check_seq_len(seq_len)
    path = _resolve(path_or_name)
    where = str(path)
    data = _parse(path)
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "nothing"
        raise SpecError(where, None, f"expected a mapping of model fields, got {kind}")
    if "pipelines" in data and "architecture" not in data:
        raise SpecError(where, None, "is a plan file, not a model; `hetplan estimate` or "
                        "`simulate` take a plan, and the model it embeds is its `model`")
    line = None
    if looks_like_hf_config(data):
        fields = from_hf_config(data, where, default_name=_hf_default_name(path, data))
        max_positions = hf_max_positions(data, where)
        fields["seq_len"], line = choose_seq_len(max_positions, seq_len, where=where,
                                                 architecture=fields["architecture"])
        if seq_len is None and line is not None:  # a plan file then says the length was ours
            fields["source"] += (f"; seq_len {fields['seq_len']} by default "
                                 f"(max_position_embeddings {max_positions})")
        data = fields
    else:
        data = {"name": path.stem, **data}
        if seq_len is not None:
            data["seq_len"] = seq_len
    spec = ModelSpec.from_dict(data, where)
    if line is not None:  # only once the spec is valid: an error line is then the only line
        (notice or print_notice)(line)
    return spec
