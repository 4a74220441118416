"""Shared output helpers: `--json` printing and the rich console."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

__all__ = ["console", "print_json", "wide_console"]

# Piped output (files, CI logs, tests) gets a wide table rather than rich's 80-column default,
# so GPU names and layer ranges are not folded.
console = Console() if sys.stdout.isatty() else Console(width=140)


def wide_console(min_width: int) -> Console:
    """`console`, at least `min_width` columns wide, for tables whose GPU names and numbers
    must not be cut (a narrower terminal wraps the lines instead)."""
    return Console(file=console.file, width=max(console.width, min_width))


def print_json(data: Any) -> None:
    """Machine output: stable key order as given, plain stdout (no rich markup)."""
    print(json.dumps(data, indent=2))
