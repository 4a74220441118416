"""A spinner on stderr while a command works: never with --json, never off a terminal.

stdout stays the command's result (a table, or JSON only), so a pipe or a file gets no
spinner frames; `hetplan plan` has its own progress bar (`cmd_plan._Bar`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console

__all__ = ["spinner"]


@contextlib.contextmanager
def spinner(text: str, *, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """Show `text` with a spinner on stderr for the block; yields `update(step)`, which
    shows `text: step`. Off (update does nothing) when `enabled` is false (--json) or
    stderr is not a terminal."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda _step: None
        return
    with console.status(text) as status:
        yield lambda step: status.update(f"{text}: {step}")
