"""Flag values at their edges (audit 3): one `error:` line, never a silent default."""

from __future__ import annotations

from tests.cli import run_cli


def test_an_empty_framework_name_is_not_hetplans(capsys) -> None:
    # `--framework "$FW"` with FW unset priced hetplan's runtime without a word.
    code, out, err = run_cli(["estimate", "tiny-llama", "dgx-a100", "--dp", "2",
                              "--global-batch", "2", "--framework", ""], capsys)
    assert code == 2 and out == "", err
    assert err.startswith("error: --framework ''") and len(err.strip().splitlines()) == 1
