"""Every dependency pyproject.toml declares is imported by the package (no dead weight in an
install), apart from the exceptions below, each with its reason."""

from __future__ import annotations

import ast
import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "cost_models")

# Declared but never imported, each with why it stays (none today: ortools went when the
# search certified its bounds without it, docs/search.md).
NOT_IMPORTED: dict[str, str] = {}


def _declared() -> list[str]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]]


def _imported() -> set[str]:
    """Top-level module names imported anywhere in the packages, lazy imports included."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names


def _modules_of(dist: str) -> set[str]:
    """The top-level modules a distribution installs (pyyaml → yaml), from its metadata."""
    found = {m for m, dists in metadata.packages_distributions().items()
             if dist in {d.lower() for d in dists}}
    return found or {dist.replace("-", "_")}


def test_every_declared_dependency_is_imported() -> None:
    imported = _imported()
    unused = [d for d in _declared()
              if d not in NOT_IMPORTED and not (_modules_of(d) & imported)]
    assert not unused, f"declared in pyproject.toml but never imported: {unused}"


def test_the_scan_maps_distributions_to_modules() -> None:
    # The distribution pyyaml installs the module `yaml`, which the packages import.
    assert "yaml" in _modules_of("pyyaml") and "yaml" in _imported()
