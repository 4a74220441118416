"""Load a ModelSpec from a zoo name, a model YAML, or a HuggingFace config.json.

Every user mistake becomes a SpecError naming the file and field, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.errors import SpecError
from planner.graph.hf_config import from_hf_config, looks_like_hf_config
from planner.graph.spec import ModelSpec

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
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(where, None, f"cannot read the file ({exc.__class__.__name__})") from None
    if not text.strip():
        raise SpecError(where, None, "the file is empty; expected model fields "
                        "(name, architecture, hidden_size, ...)")
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(where, None, f"not valid JSON: {exc.msg} at line {exc.lineno}, "
                            f"column {exc.colno}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise SpecError(where, None, f"not valid YAML: {problem}{at}") from None


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
