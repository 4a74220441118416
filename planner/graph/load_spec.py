"""Load a ModelSpec from a zoo name, a model YAML, or a HuggingFace config.json.

Every user mistake becomes a SpecError naming the file and field, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.graph.hf_config import from_hf_config, looks_like_hf_config
from planner.graph.spec import ModelSpec
from planner.input_files import load_json, load_yaml_mapping

__all__ = ["MODELS_DIR", "load_model_spec", "zoo_names"]

# configs/ sits beside planner/ at the repository root (it is not package data).
MODELS_DIR = Path(__file__).resolve().parents[2] / "configs" / "models"


def zoo_names() -> list[str]:
    """Names of the bundled models (configs/models/*.yaml), sorted."""
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
                             example="configs/models/llama3-8b.yaml")


def load_model_spec(path_or_name: str | Path) -> ModelSpec:
    """A validated ModelSpec from a bundled name (`llama3-8b`), a YAML, or a config.json."""
    path = _resolve(path_or_name)
    where = str(path)
    data = _parse(path)
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "nothing"
        raise SpecError(where, None, f"expected a mapping of model fields, got {kind}")
    if looks_like_hf_config(data):
        default_name = path.parent.name if path.name == "config.json" else path.stem
        data = from_hf_config(data, where, default_name=default_name)
    else:
        data = {"name": path.stem, **data}
    return ModelSpec.from_dict(data, where)
