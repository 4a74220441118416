"""Model specs: the zoo, HuggingFace config.json files, and one clear line for every mistake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli.main import main
from planner.errors import SpecError
from planner.graph import extract, load_model_spec, zoo_names
from planner.graph.spec import ModelSpec

REPO = Path(__file__).resolve().parents[1]

GOOD = """\
name: m
architecture: gpt
hidden_size: 64
num_layers: 2
num_attention_heads: 4
vocab_size: 100
seq_len: 16
"""


def test_zoo_has_the_required_models_each_with_a_source() -> None:
    required = {"gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "gpt2-medium",
                "opt-350m", "gpt-neo-2.7b", "gpt2-amp", "tiny", "tiny-llama"}
    assert required <= set(zoo_names())
    for name in zoo_names():
        spec = load_model_spec(name)
        assert spec.name == name and spec.source


def test_defaults_follow_the_architecture(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD)
    spec = load_model_spec(path)
    assert (spec.num_kv_heads, spec.ffn_hidden_size, spec.tie_embeddings) == (4, 256, True)
    llama = spec.replace(architecture="llama", hidden_size=4096, num_attention_heads=32,
                         ffn_hidden_size=None)
    assert llama.ffn_hidden_size == 11008  # Llama-2-7B's width from Meta's 8h/3 rule
    assert ModelSpec.from_dict(spec.to_dict()) == spec


def _hf(tmp_path: Path, data: dict) -> Path:
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder / "config.json"


def test_hf_llama3_8b_config_gives_the_published_parameter_count(tmp_path: Path) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
           "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False}
    spec = load_model_spec(_hf(tmp_path, cfg))
    assert spec.architecture == "llama" and spec.num_kv_heads == 8 and spec.name == "hf-model"
    assert extract(spec).params == 8_030_261_248


def test_hf_gpt2_config_gives_gpt2_small_count(tmp_path: Path) -> None:
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
           "n_positions": 1024, "vocab_size": 50257, "n_inner": None}
    spec = load_model_spec(_hf(tmp_path, cfg))
    assert (spec.architecture, spec.ffn_hidden_size, spec.tie_embeddings) == ("gpt", 3072, True)
    assert extract(spec).params == 124_439_808  # GPT-2 small, tied LM head


@pytest.mark.parametrize(("cfg", "kv", "ffn"), [
    ({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
      "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1e6}, 8, 14336),
    ({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
      "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
      "vocab_size": 152064, "max_position_embeddings": 32768}, 4, 18944),
    ({"model_type": "opt", "hidden_size": 1024, "num_hidden_layers": 24, "ffn_dim": 4096,
      "num_attention_heads": 16, "vocab_size": 50272, "max_position_embeddings": 2048,
      "word_embed_proj_dim": 512}, 16, 4096),
])
def test_hf_gqa_and_opt_configs(tmp_path: Path, cfg: dict, kv: int, ffn: int) -> None:
    spec = load_model_spec(_hf(tmp_path, cfg))
    assert (spec.num_kv_heads, spec.ffn_hidden_size) == (kv, ffn)
    if cfg["model_type"] == "opt":
        assert "word_embed_proj_dim 512" in spec.source


BAD = [
    ("empty.yaml", "", "the file is empty"),
    ("syntax.yaml", "name: [unclosed\n", "not valid YAML"),
    ("list.yaml", "- a\n- b\n", "must be a YAML mapping"),
    ("missing.yaml", GOOD.replace("num_layers: 2\n", ""), "num_layers: missing"),
    ("type.yaml", GOOD.replace("hidden_size: 64", "hidden_size: big"), "hidden_size: Input"),
    ("float.yaml", GOOD.replace("num_layers: 2", "num_layers: 2.5"), "num_layers:"),
    ("negative.yaml", GOOD.replace("num_layers: 2", "num_layers: -3"),
     "greater than or equal to 1"),
    ("heads.yaml", GOOD.replace("num_attention_heads: 4", "num_attention_heads: 5"),
     "num_attention_heads: 5 does not divide hidden_size 64"),
    ("kv.yaml", GOOD + "num_kv_heads: 3\n", "num_kv_heads: 3 does not divide"),
    ("arch.yaml", GOOD.replace("architecture: gpt", "architecture: bert"), "architecture:"),
    ("prec.yaml", GOOD + "training:\n  precision: fp8\n", "training.precision:"),
    ("extra.yaml", GOOD + "hiden_size: 3\n", "hiden_size: unknown field"),
    ("bad.json", "{not json", "not valid JSON"),
    ("config.json", json.dumps({"model_type": "bert", "hidden_size": 8}), "model_type:"),
    ("x/config.json", json.dumps({"model_type": "llama", "hidden_size": 8}),
     "num_attention_heads: missing from the HuggingFace config"),
]


@pytest.mark.parametrize(("filename", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_malformed_spec_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], filename: str,
                                           text: str, expected: str) -> None:
    path = tmp_path / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(SpecError):
        load_model_spec(path)
    monkeypatch.setattr(sys, "argv", ["hetplan", "inspect", str(path)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert str(path) in err and expected in err
    assert "Traceback" not in err


def test_unknown_name_lists_the_zoo() -> None:
    with pytest.raises(SpecError, match="bundled: .*llama3-8b"):
        load_model_spec("llama-9000")


def test_cli_process_prints_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "heads.yaml"
    path.write_text(GOOD.replace("num_attention_heads: 4", "num_attention_heads: 5"))
    proc = subprocess.run([sys.executable, "-m", "planner.cli.main", "inspect", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
