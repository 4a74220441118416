"""Run `hetplan` in-process, as a user would from the shell, and capture what it prints."""

from __future__ import annotations

import sys

import pytest

from planner.cli.main import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `hetplan *argv`."""
    old = sys.argv
    sys.argv = ["hetplan", *argv]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return int(code), out.out, out.err
