"""Shared output helpers: `--json` printing and the rich console."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

__all__ = ["console", "print_json"]

console = Console()


def print_json(data: Any) -> None:
    """Machine output: stable key order as given, plain stdout (no rich markup)."""
    print(json.dumps(data, indent=2))
