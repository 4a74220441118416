"""User-facing errors: one line that says what is wrong, where, and how to fix it.

The CLI prints `error: <message>` for these and exits non-zero without a traceback;
anything else that escapes is a bug in hetplan and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["ArgumentError", "ArgumentTypeError", "HetplanError", "InfeasibleError", "SpecError"]


class HetplanError(Exception):
    """A problem with the user's input or request, explained in one line."""


class SpecError(HetplanError):
    """A model, cluster or plan file that is malformed (names file and field)."""

    def __init__(self, where: str, field: str | None, message: str) -> None:
        location = f"{where}: {field}" if field else where
        super().__init__(f"{location}: {message}")
        self.where = where
        self.field = field


class InfeasibleError(HetplanError):
    """The request cannot be met on this cluster; the message carries the numbers."""


class ArgumentError(HetplanError, ValueError):
    """A Python API argument with a bad value (a ValueError too, as Python callers expect)."""


class ArgumentTypeError(HetplanError, TypeError):
    """A Python API argument of the wrong type (a TypeError too, as Python callers expect)."""
