"""Flag values found in review to end in a traceback, a second line or a silent no-op: each
is now one `error:` line with exit 2, before any search runs."""

from __future__ import annotations

import pytest

from tests.cli import run_cli


@pytest.mark.parametrize("args", [
    ["compare", "tiny", "dgx-a100", "--budget-usd-per-hour", "nan"],
    ["compare", "tiny", "dgx-a100", "--budget-usd-per-hour", "-5"],
    ["plan", "tiny", "dgx-a100", "--micro-batch", "\u00b2"],      # a digit to isdigit(), not int()
    ["plan", "tiny", "dgx-a100", "--micro-batch", "9" * 5000],   # over int()'s 4,300 digits
    ["inspect", "tiny", "--seq-len", "9" * 5000],
    ["whatif", "tiny", "lab-mixed", "--price", "a100=1.2"],      # applies to both sides: no-op
])
def test_one_line_and_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(args, capsys)
    assert code == 2, err
    assert err.startswith("error:") and err.count("\n") == 1 and "Traceback" not in err
