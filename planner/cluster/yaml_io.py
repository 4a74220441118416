"""Read a user's YAML file strictly: one clear SpecError for empty, unreadable or invalid files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from planner.errors import SpecError

__all__ = ["read_yaml_mapping"]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML silently keeps the last one)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


def read_yaml_mapping(path: Path, where: str, *, what: str, example: str) -> dict[str, Any]:
    """The file's top-level mapping; SpecError(where, ...) when it is anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(where, None, f"cannot read the {what} file: {exc}") from None
    if not text.strip():
        raise SpecError(where, None, f"the {what} file is empty (see {example})")
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "malformed"
        raise SpecError(where, None, f"not valid YAML{at}: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(where, None, f"not valid YAML: {' '.join(str(exc).split())}") from None
    if data is None:
        raise SpecError(where, None, f"the {what} file holds no data (see {example})")
    if not isinstance(data, dict):
        raise SpecError(where, None, f"a {what} file must be a YAML mapping (`key: value` lines), "
                        f"got {type(data).__name__} (see {example})")
    return data
