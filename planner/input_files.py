"""Read a user's YAML or JSON file safely: every fault is one SpecError line, never a
traceback, a hang or an out-of-memory.

Faults handled here, before any field is looked at: a path that is missing, a directory, not a
regular file (a FIFO would block forever), unreadable, larger than any real input, empty, not
UTF-8 text (binary garbage), syntax errors, nesting deeper than any real file, YAML
aliases that expand past a small budget (an alias "billion laughs" file is 1 KB on disk and
gigabytes in memory), a key given twice in one mapping (YAML and JSON silently keep the last),
integers too long to parse, and (unless the caller allows them) inf/NaN numbers. Messages
never echo more than a few dozen characters of the input (`short`).
"""

from __future__ import annotations

import json
import math
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from planner.errors import SpecError

__all__ = ["MAX_DEPTH", "MAX_JSON_BYTES", "MAX_YAML_BYTES", "MAX_YAML_NODES", "clip", "load_json",
           "load_yaml_mapping", "parse_json_text", "read_text", "short"]

# Real inputs: model and cluster YAMLs are about 1 KB, plan JSONs (which embed a model's
# measured layer table) under 1 MB. The limits are 100x or more above those.
MAX_YAML_BYTES = 4 * 2**20
MAX_JSON_BYTES = 64 * 2**20
MAX_YAML_NODES = 200_000
"""Scalars, lists and mappings after every alias is expanded (a 1,024-node cluster file: ~10k)."""
MAX_DEPTH = 64
"""Nesting of lists and mappings (real files: under 8)."""


def short(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters: an error never prints a whole (huge) input."""
    return clip(_bounded_repr(value, limit), limit)


def clip(text: str, limit: int = 120) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded_repr(value: Any, limit: int) -> str:
    # repr() of a shared-reference structure is as large as its expansion: look at a prefix.
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: ..." for k in list(value)[:3]) + "}" if value else "{}"
    if isinstance(value, list | tuple):
        return f"[... {len(value)} items]"
    if isinstance(value, str):
        return repr(value[: limit + 1])
    return repr(value)


def read_text(path: str | Path, where: str, *, what: str, max_bytes: int) -> str:
    """The file's text; SpecError for a missing, special, unreadable, huge or binary file."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecError(where, None, f"cannot read the {what} file: no such file; check the "
                        "path") from None
    except OSError as exc:
        raise SpecError(where, None, f"cannot read the {what} file ({exc.strerror})") from None
    except ValueError:  # a NUL byte in the path
        raise SpecError(where, None, "not a usable path (it holds a NUL byte)") from None
    if stat.S_ISDIR(st.st_mode):
        raise SpecError(where, None, f"is a directory; give the {what} file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(where, None, f"is not a regular file; give a {what} file")
    if st.st_size > max_bytes:
        raise SpecError(where, None, f"{st.st_size:,} bytes is too large for a {what} file "
                        f"(limit {max_bytes:,}); check that this is the right file")
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(where, None, f"cannot read the {what} file ({exc.strerror})") from None
    if len(raw) > max_bytes:
        raise SpecError(where, None, f"too large for a {what} file (limit {max_bytes:,} bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(where, None, f"cannot read the {what} file: not UTF-8 text (byte "
                        f"{exc.start}); give a {what} file") from None
    if "\x00" in text:
        raise SpecError(where, None, f"cannot read the {what} file: not text (it holds NUL "
                        f"bytes); give a {what} file")
    if not text.strip():
        raise SpecError(where, None, f"the file is empty; expected a {what} file")
    return text


# --- YAML ------------------------------------------------------------------------------------

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML silently keeps the last one)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # a list or mapping as a key
            raise yaml.constructor.ConstructorError(
                None, None, "a list or mapping cannot be a key", key_node.start_mark) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {short(key, 40)} appears twice in one mapping",
                key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


class _TooBig(Exception):
    def __init__(self, message: str, node: yaml.Node) -> None:
        super().__init__(message)
        self.node = node


def _expanded_size(root: yaml.Node) -> int:
    """Nodes after alias expansion, memoised per node object (aliases share one), so an alias
    bomb is measured in time linear in its size on disk; refuses cycles and deep nesting."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _TooBig("an alias refers to the list or mapping that contains it", node)
        if depth > MAX_DEPTH:
            raise _TooBig(f"nested more than {MAX_DEPTH} levels deep", node)
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        active.discard(key)
        if total > MAX_YAML_NODES:
            raise _TooBig(f"expands to more than {MAX_YAML_NODES:,} values (aliases `*name` "
                          "repeat what they point to); write the values out", node)
        sizes[key] = total
        return total

    return size(root, 0)


def _yaml_error(where: str, exc: yaml.YAMLError) -> SpecError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "malformed"
        return SpecError(where, None, f"not valid YAML{at}: {clip(problem)}")
    return SpecError(where, None, f"not valid YAML: {clip(str(exc))}")


def _bracket_depth(text: str) -> int:
    """Deepest nesting of flow brackets (`[`, `{`); quoted brackets count too, which only
    overstates a depth no real file comes near. PyYAML's parser takes seconds to reach its
    recursion limit on a few KB of `[[[[`, so this is checked first."""
    depth = deepest = 0
    for ch in _NOT_BRACKET.sub("", text):
        depth = depth + 1 if ch in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _load_yaml(text: str, where: str) -> Any:
    if _bracket_depth(text) > MAX_DEPTH:
        raise SpecError(where, None, f"nested more than {MAX_DEPTH} levels deep; check the "
                        "file's brackets")
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except _TooBig as exc:
        at = exc.node.start_mark
        raise SpecError(where, None, f"{exc} (line {at.line + 1})") from None
    except yaml.YAMLError as exc:
        raise _yaml_error(where, exc) from None
    except RecursionError:
        raise SpecError(where, None, f"nested too deeply (more than {MAX_DEPTH} levels); "
                        "check the file's brackets and indentation") from None
    except ValueError as exc:  # an integer of thousands of digits (int() refuses it)
        raise SpecError(where, None, f"a number cannot be read ({clip(str(exc), 80)})") from None
    finally:
        loader.dispose()


def load_yaml_mapping(path: str | Path, where: str, *, what: str, example: str,
                      finite: bool = True) -> dict[str, Any]:
    """The file's top-level mapping; SpecError(where, ...) when it is anything else.
    `finite`: refuse .inf and .nan anywhere (no field of a model or cluster takes them)."""
    text = read_text(path, where, what=what, max_bytes=MAX_YAML_BYTES)
    data = _load_yaml(text, where)
    if data is None:
        raise SpecError(where, None, f"the {what} file holds no data (see {example})")
    if not isinstance(data, dict):
        raise SpecError(where, None, f"a {what} file must be a YAML mapping (`key: value` "
                        f"lines), got {_kind(data)} (see {example})")
    if finite:
        _refuse_non_finite(data, where)
    return data


# --- JSON ------------------------------------------------------------------------------------

def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {short(key, 40)} appears twice in one object")
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; write a finite number")


def parse_json_text(text: str, where: str, *, finite: bool = True) -> Any:
    """json.loads with every fault as one SpecError: duplicate keys, deep nesting, integers
    too long, and (when `finite`) NaN / Infinity / 1e999."""
    try:
        data = json.loads(text, object_pairs_hook=_object_without_duplicates,
                          **({"parse_constant": _refuse_constant} if finite else {}))
    except json.JSONDecodeError as exc:
        raise SpecError(where, None, f"not valid JSON at line {exc.lineno}, column "
                        f"{exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError(where, None, f"nested too deeply (more than {MAX_DEPTH} levels); "
                        "check the file's brackets") from None
    except ValueError as exc:
        raise SpecError(where, None, f"not valid JSON: {clip(str(exc))}") from None
    if _depth(data) > MAX_DEPTH:
        raise SpecError(where, None, f"nested more than {MAX_DEPTH} levels deep; check the "
                        "file's brackets")
    if finite:
        _refuse_non_finite(data, where)
    return data


def load_json(path: str | Path, where: str, *, what: str, finite: bool = True) -> Any:
    """The file's JSON value (see parse_json_text)."""
    return parse_json_text(read_text(path, where, what=what, max_bytes=MAX_JSON_BYTES), where,
                           finite=finite)


# --- shared ----------------------------------------------------------------------------------

def _kind(value: Any) -> str:
    names = {list: "a list", str: "a string", int: "a number", float: "a number",
             bool: "true/false"}
    return names.get(type(value), type(value).__name__)


def _depth(data: Any) -> int:
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                stack.extend((v, d + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
    return deepest


def _refuse_non_finite(data: Any, where: str) -> None:
    """First inf/NaN as `where: field.path: ...` (iterative: the structure is bounded but may
    share references, so each container is visited once)."""
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        item, at = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise SpecError(where, at or None, f"{item} is not a finite number; write one")
        if isinstance(item, dict | list) and id(item) not in seen:
            seen.add(id(item))
            if isinstance(item, dict):
                steps = [(v, f"{at}.{k}" if at else str(k)) for k, v in item.items()]
            else:
                steps = [(v, f"{at}[{i}]") for i, v in enumerate(item)]
            stack.extend(reversed(steps))
