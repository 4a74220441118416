"""`--seq-len`: the training sequence length, and the default a HuggingFace config.json gets.

A config.json's `max_position_embeddings` (131,072 for Qwen2.5-7B) is the longest context,
not a training length; planning at it used to price 128k-token sequences without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import run_cli

QWEN = Path(__file__).parent / "fixtures" / "qwen2.5-7b"
QWEN_CONFIG = str(QWEN / "config.json")
# Qwen2.5-7B's published config.json (the fixture): the figures of the closed forms below.
H, KV_DIM, FFN = 3584, 4 * 128, 18944
# Weights every token meets in one block's matmuls: q, k, v, o and SwiGLU's three.
BLOCK_MATMUL_WEIGHTS = H * (H + 2 * KV_DIM) + H * H + 3 * H * FFN


def _tiny_hf(tmp_path: Path, max_positions: int = 512) -> str:
    folder = tmp_path / "tiny-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 256, "max_position_embeddings": max_positions}))
    return str(folder / "config.json")


def _lines(err: str) -> list[str]:
    return [line for line in err.strip().splitlines() if line]


def test_config_json_defaults_to_4096_with_one_notice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["inspect", QWEN_CONFIG, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["seq_len"] == 4096
    assert "seq_len 4096 by default (max_position_embeddings 131072)" in data["spec"]["source"]
    (line,) = _lines(err)
    assert line.startswith("notice:") and "seq_len 4,096" in line and "131,072" in line
    assert "--seq-len" in line
    # A model YAML states its own training length: kept, nothing printed.
    code, out, err = run_cli(["inspect", "llama3-8b", "--json"], capsys)
    assert code == 0 and json.loads(out)["seq_len"] == 8192 and err == ""


def test_short_context_config_keeps_its_own_length(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["inspect", _tiny_hf(tmp_path, 512), "--json"], capsys)
    assert code == 0 and json.loads(out)["seq_len"] == 512
    assert "notice:" in err


def test_seq_len_prices_attention_quadratic_and_the_rest_linear(
        capsys: pytest.CaptureFixture[str]) -> None:
    blocks = {}
    for s in (1024, 3000):
        code, out, err = run_cli(["inspect", QWEN_CONFIG, "--json", "--seq-len", str(s)], capsys)
        assert code == 0 and err == "", err  # an explicit length: no notice
        data = json.loads(out)
        assert data["seq_len"] == s
        blocks[s] = data["layers"][1]
    for s, block in blocks.items():
        # Korthikanti et al. eq. 7, non-causal: QKᵀ and AV, 2·s²·h FLOPs each.
        assert block["fwd_attention_flops"] == 4 * s * s * H
        assert block["fwd_matmul_flops"] == 2 * s * BLOCK_MATMUL_WEIGHTS + 4 * s * s * H
    # Saved activations (flash attention keeps no s×s matrix) grow linearly with s.
    assert blocks[3000]["activation_bytes"] * 1024 == pytest.approx(
        blocks[1024]["activation_bytes"] * 3000, rel=1e-12)


def test_estimate_seq_len_memory_linear_and_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    mem, records = {}, {}
    for s in (1024, 2048, 3072):
        code, out, err = run_cli(["estimate", QWEN_CONFIG, "dgx-a100", "--tp", "4", "--pp", "1",
                                  "--dp", "16", "--global-batch", "64", "--seq-len", str(s),
                                  "--json"], capsys)
        assert code == 0, err
        records[s] = json.loads(out)
        mem[s] = records[s]["stages"][0]["peak_memory_gib"]
    for s, rec in records.items():
        assert (rec["seq_len"], rec["global_batch_size"], rec["micro_batch_size"]) == (s, 64, 1)
        assert rec["tokens_per_iteration"] == 64 * s
    # Weights and optimizer state do not move with s; activations (one micro-batch in
    # flight, no s×s term) add the same amount for every 1024 tokens.
    assert mem[2048] > mem[1024]
    assert mem[3072] - mem[2048] == pytest.approx(mem[2048] - mem[1024], abs=1e-5)


def test_tables_show_seq_len_and_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["estimate", QWEN_CONFIG, "dgx-a100", "--tp", "4", "--dp", "16",
                              "--micro-batch", "2", "--global-batch", "64"], capsys)
    assert code == 0, err
    assert "seq_len 4,096 × global batch 64 (micro-batch 2) = 262,144 tokens per iteration" in out
    plan_file = tmp_path / "plan.json"
    code, out, err = run_cli(["plan", "tiny", "amp-het", "--global-batch", "16", "--top-k", "1",
                              "--seq-len", "256", "-o", str(plan_file)], capsys)
    assert code == 0, err
    assert "seq_len 256 × global batch 16 (micro-batch " in out
    assert json.loads(plan_file.read_text())["model"]["seq_len"] == 256


def test_plan_file_records_and_reprices_its_seq_len(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    plan_file = tmp_path / "plan.json"
    code, _, err = run_cli(["plan", "tiny", "amp-het", "--global-batch", "16", "--top-k", "1",
                            "--seq-len", "256", "-o", str(plan_file), "--json"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["estimate", str(plan_file), "--json", "--seq-len", "256"], capsys)
    assert code == 0 and err == "" and json.loads(out)["seq_len"] == 256
    code, out, err = run_cli(["estimate", str(plan_file), "--json", "--seq-len", "512"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    assert rec["seq_len"] == 512 and rec["tokens_per_iteration"] == 16 * 512
    (line,) = _lines(err)
    assert line.startswith("notice:") and "planned at seq_len 256" in line and "512" in line


def test_relative_config_path_gets_the_folder_name(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(QWEN)
    for arg in ("config.json", "./config.json"):
        code, out, err = run_cli(["inspect", arg, "--json", "--seq-len", "128"], capsys)
        assert code == 0, err
        assert json.loads(out)["name"] == "qwen2.5-7b"


def test_config_json_named_after_model_type_at_the_root(tmp_path: Path) -> None:
    from planner.graph.load_spec import _hf_default_name

    assert _hf_default_name(Path("/config.json"), {"model_type": "qwen2"}) == "qwen2"


@pytest.mark.parametrize("bad", ["0", "-5", "4096.5", "4k", "", "1e4"])
def test_bad_seq_len_is_one_error_line(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["estimate", "tiny", "amp-het", "--seq-len", bad], capsys)
    assert code == 2 and out == ""
    (line,) = _lines(err)
    assert line.startswith("error: --seq-len") and "positive whole number" in line


def test_seq_len_above_max_positions_warns(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["inspect", _tiny_hf(tmp_path, 512), "--json", "--seq-len",
                              "1024"], capsys)
    assert code == 0 and json.loads(out)["seq_len"] == 1024
    (line,) = _lines(err)
    assert line.startswith("warning:") and "max_position_embeddings 512" in line


def test_api_takes_seq_len(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import planner

    model = planner.load_model(_tiny_hf(tmp_path), seq_len=128)
    assert model.seq_len == 128 and capsys.readouterr().err == ""
    assert planner.load_model(model, seq_len=64).seq_len == 64
    result = planner.plan("tiny", planner.load_cluster("amp-het"), global_batch_size=16,
                          top_k=1, seq_len=128)
    assert result.best.model["seq_len"] == 128
    with pytest.raises(planner.HetplanError, match="positive whole number"):
        planner.load_model("tiny", seq_len=0)


def test_compare_whatif_simulate_show_seq_len_and_batch(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    line = "seq_len 256 × global batch 16 = 4,096 tokens per iteration"
    code, out, err = run_cli(["compare", "tiny", "amp-het", "--global-batch", "16",
                              "--seq-len", "256"], capsys)
    assert code == 0, err
    assert line in out and "µbatch" in out
    code, out, err = run_cli(["compare", "tiny", "amp-het", "--global-batch", "16",
                              "--seq-len", "256", "--json"], capsys)
    (row,) = json.loads(out)
    assert (row["seq_len"], row["global_batch_size"]) == (256, 16)
    code, out, err = run_cli(["whatif", "tiny", "amp-het", "--remove", "g4dn", "--global-batch",
                              "16", "--seq-len", "256"], capsys)
    assert code == 0, err
    assert line in out and "micro-batch" in out
    plan_file = tmp_path / "plan.json"
    code, _, err = run_cli(["plan", "tiny", "amp-het", "--global-batch", "16", "--top-k", "1",
                            "--seq-len", "256", "-o", str(plan_file), "--json"], capsys)
    assert code == 0, err
    micro = json.loads(plan_file.read_text())["micro_batch_size"]
    code, out, err = run_cli(["simulate", str(plan_file)], capsys)
    assert code == 0, err
    assert (f"seq_len 256 × global batch 16 (micro-batch {micro}) = 4,096 tokens per "
            "iteration") in out
    code, out, err = run_cli(["simulate", str(plan_file), "--seq-len", "512", "--json"], capsys)
    assert code == 0 and "planned at seq_len 256" in err
    assert json.loads(out)["tokens_per_iteration"] == 16 * 512


def test_profile_rows_are_for_the_seq_len_asked(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from cost_models.profiles import read_profile_csv

    out_csv = tmp_path / "p.csv"
    code, out, err = run_cli(["profile", "tiny", "--device", "cpu", "--gpu", "A100",
                              "--micro-batches", "1", "--warmup", "0", "--repeats", "1",
                              "--seq-len", "32", "--out", str(out_csv), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["seq_len"] == 32
    assert {r.seq_len for r in read_profile_csv(out_csv)} == {32}


def test_replan_keeps_and_shows_the_plans_seq_len(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    plan_file, new_file = tmp_path / "plan.json", tmp_path / "new.json"
    code, _, err = run_cli(["plan", "tiny", "amp-het", "--global-batch", "16", "--top-k", "1",
                            "--seq-len", "256", "-o", str(plan_file), "--json"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["replan", str(plan_file), "--remove", "g4dn", "-o",
                              str(new_file)], capsys)
    assert code == 0, err
    new = json.loads(new_file.read_text())
    assert new["model"]["seq_len"] == 256
    assert (f"seq_len 256 × global batch 16 (micro-batch {new['micro_batch_size']}) = 4,096 "
            "tokens per iteration") in out


@pytest.mark.parametrize("name_or_path", ["/", "./", "", "meta-llama/Llama-3.1-8B"])
def test_config_json_name_is_never_empty(name_or_path: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    folder = Path(_tiny_hf(tmp_path)).parent
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, "_name_or_path": name_or_path}))
    code, out, err = run_cli(["inspect", str(folder / "config.json"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["name"] == ("Llama-3.1-8B" if "/L" in name_or_path else "tiny-hf")


def test_a_measured_module_keeps_its_length(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    import planner
    from planner.cluster import cluster_from_dict
    from tests.user_models import S, make_net

    model = planner.from_module(make_net(), torch.zeros(2, S, dtype=torch.long), name="usernet")
    assert planner.load_model(model, seq_len=S) is model
    with pytest.raises(planner.HetplanError, match=f"measured from a module at seq_len {S}"):
        planner.load_model(model, seq_len=2 * S)
    cluster = cluster_from_dict({"name": "four-t4", "nodes": [
        {"name": "box", "count": 1, "gpu": "T4", "gpus_per_node": 4, "intra_node": "pcie",
         "inter_node_gbps": 50}]})
    path = tmp_path / "mine.json"
    planner.plan(model, cluster, global_batch_size=8, seq_len=S).best.save(path)
    code, out, err = run_cli(["estimate", str(path), "--seq-len", str(2 * S)], capsys)
    assert code == 2 and out == ""
    (line,) = _lines(err)
    assert line.startswith("error:") and f"measured at seq_len {S}" in line
