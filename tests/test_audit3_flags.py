"""Flag values at their edges (audit 3): one `error:` line, never a silent default."""

from __future__ import annotations

from tests.cli import run_cli


def test_an_empty_framework_name_is_not_hetplans(capsys) -> None:
    # `--framework "$FW"` with FW unset priced hetplan's runtime without a word.
    code, out, err = run_cli(["estimate", "tiny-llama", "dgx-a100", "--dp", "2",
                              "--global-batch", "2", "--framework", ""], capsys)
    assert code == 2 and out == "", err
    assert err.startswith("error: --framework ''") and len(err.strip().splitlines()) == 1


def test_a_chunk_of_no_layers_is_named_not_blamed_on_the_sum(capsys) -> None:
    # "0,6" sums to tiny-llama's 6 layers; the message said "they sum to 6" after asking for
    # a sum of 6, without naming the empty chunk.
    code, _, err = run_cli(["estimate", "tiny-llama", "dgx-a100", "--pp", "2", "--dp", "1",
                            "--global-batch", "2", "--layers-per-stage", "0,6"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "0 layers in a chunk" in err and "sum to" not in err
