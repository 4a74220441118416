"""Odd fields of a HuggingFace mixture-of-experts config.json (audit 3): each is one `error:`
line naming the config's own field, never a misread number of parameters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_cli

FIXTURES = Path(__file__).parent / "fixtures"


def _inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str,
             **fields: Any) -> tuple[int, str, str]:
    data = json.loads((FIXTURES / fixture / "config.json").read_text())
    data.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return run_cli(["inspect", str(path), "--json"], capsys)


@pytest.mark.parametrize("value", ["2", True, 1.5, -1])
def test_deepseek_shared_experts_must_be_a_count(tmp_path, capsys, value) -> None:
    # "2" became moe_intermediate_size copies of "2" (a 1408-digit number in the message);
    # true counted as one shared expert.
    code, _, err = _inspect(tmp_path, capsys, "deepseek-moe-16b", n_shared_experts=value)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert "n_shared_experts" in err and "2222" not in err


@pytest.mark.parametrize(("fixture", "field"), [("qwen1.5-moe-a2.7b", "norm_topk_prob"),
                                                ("qwen2.5-7b", "tie_word_embeddings"),
                                                ("deepseek-moe-16b", "tie_word_embeddings")])
def test_a_quoted_false_is_not_read_as_true(tmp_path, capsys, fixture, field) -> None:
    # bool("false") is True: a tied head would drop the head's parameters from the count.
    code, _, err = _inspect(tmp_path, capsys, fixture, **{field: "false"})
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert field in err


def test_the_fixtures_themselves_still_load(tmp_path, capsys) -> None:
    for fixture in ("qwen1.5-moe-a2.7b", "qwen2.5-7b", "deepseek-moe-16b"):
        code, out, err = _inspect(tmp_path, capsys, fixture)
        assert code == 0, err
        assert json.loads(out)["params"] > 0


@pytest.mark.parametrize("value", [0, False, ""])
def test_zero_kv_heads_is_refused_not_read_as_one_per_head(tmp_path, capsys, value) -> None:
    # `or None` made 0, false and "" mean "no GQA": Qwen2.5-7B was priced with 28 KV heads
    # instead of 4 (8.23 G parameters instead of 7.62 G) without a word.
    code, _, err = _inspect(tmp_path, capsys, "qwen2.5-7b", num_key_value_heads=value)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert "num_kv_heads" in err
