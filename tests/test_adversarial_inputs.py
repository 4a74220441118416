"""Bad input files and flags through the CLI: each ends in one `error:` line and exit 2,
never a traceback, a hang or an out-of-memory (issue 12).

Each class of bad input has its own test; `test_sweep` then feeds a handful of bad files to
every command that reads a file. The bomb and huge-number cases also assert that the
refusal costs under 2 s of CPU (before the safe loader, a 1 KB alias bomb ran 148 s to an
out-of-memory)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from planner.limits import MAX_GLOBAL_BATCH, MAX_HIDDEN, MAX_LAYERS
from tests.cli import run_cli

GOOD_MODEL = """\
architecture: llama
hidden_size: 64
num_layers: 2
num_attention_heads: 4
vocab_size: 128
seq_len: 32
training: {global_batch_size: 8}
"""


def _alias_bomb() -> str:
    # Ten levels of ten aliases each: 10^10 leaves once expanded, 400 bytes on disk.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


# name -> (file suffix, content as bytes / str, or None for "make a directory")
BAD_FILES: dict[str, tuple[str, bytes | str | None]] = {
    "binary": (".yaml", bytes(range(256)) * 8),
    "empty": (".yaml", ""),
    "whitespace": (".yaml", "   \n\n"),
    "directory": (".yaml", None),
    "top-level list": (".yaml", "- 1\n- 2\n"),
    "alias bomb": (".yaml", _alias_bomb()),
    "self alias": (".yaml", "a: &a [1, *a]\n"),
    "deep yaml": (".yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n"),
    "duplicate yaml key": (".yaml", GOOD_MODEL + "hidden_size: 128\n"),
    "huge int yaml": (".yaml", GOOD_MODEL.replace("hidden_size: 64", "hidden_size: " + "9" * 6000)),
    "nan yaml": (".yaml", GOOD_MODEL + "norm_eps: .nan\n"),
    "inf yaml": (".yaml", GOOD_MODEL + "rope_theta: .inf\n"),
    "bad json": (".json", "{\"pipelines\": [1, 2,"),
    "deep json": (".json", "[" * 100_000 + "]" * 100_000),
    "duplicate json key": (".json", '{"a": 1, "a": 2}'),
    "nan json": (".json", '{"hidden_size": NaN}'),
    "huge int json": (".json", '{"hidden_size": ' + "9" * 6000 + "}"),
    "json list": (".json", "[1, 2, 3]"),
}


def _make(tmp_path: Path, name: str) -> Path:
    suffix, content = BAD_FILES[name]
    path = tmp_path / f"bad{suffix}"
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _assert_clean(code: int, err: str, *, expect: int = 2) -> str:
    """One `error:` line on stderr, exit `expect`, no traceback; returns the line."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert code == expect, (code, err)
    return lines[0]


def _timed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    start = time.process_time()
    code, out, err = run_cli(argv, capsys)
    return code, out, err, time.process_time() - start


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Import every command (and torch) once, so CPU-time bounds time the refusal, not the
    imports."""
    import planner.cli.main as cli
    from planner.graph import load_model

    cli._register()
    load_model("tiny")


# --- one test per class of bad input ------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = _make(tmp_path, name)
    code, _, err, cpu_s = _timed(["inspect", str(path)], capsys)
    line = _assert_clean(code, err)
    assert str(path) in line
    assert cpu_s < 2.0, (name, cpu_s)


@pytest.mark.parametrize("name", ["binary", "directory", "alias bomb", "deep yaml",
                                  "duplicate yaml key", "top-level list", "empty"])
def test_bad_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = _make(tmp_path, name)
    code, _, err, cpu_s = _timed(["plan", "tiny", str(path)], capsys)
    _assert_clean(code, err)
    assert cpu_s < 2.0, (name, cpu_s)


def test_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    for argv in (["inspect", str(missing)], ["plan", "tiny", str(missing)],
                 ["estimate", str(tmp_path / "nope.json")], ["export", str(missing), "--to",
                                                               "megatron"]):
        code, _, err = run_cli(argv, capsys)
        _assert_clean(code, err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "locked.yaml"
    path.write_text(GOOD_MODEL)
    path.chmod(0)
    code, _, err = run_cli(["inspect", str(path)], capsys)
    assert "cannot read" in _assert_clean(code, err)


@pytest.mark.parametrize("field,value,limit", [
    ("num_layers", 10**7, MAX_LAYERS),
    ("hidden_size", 2**40, MAX_HIDDEN),
])
def test_model_numbers_above_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    field: str, value: int, limit: int) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(GOOD_MODEL.replace(f"{field}: ", f"{field}: {value}  # ", 1))
    code, _, err, cpu_s = _timed(["inspect", str(path)], capsys)
    line = _assert_clean(code, err)
    assert field in line and f"{limit:,}" in line, line
    assert cpu_s < 2.0


def test_attention_scores_too_large(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 2^24 tokens × 4 heads: 2^50 elements fit; 2^24 tokens × 2^14 heads (2^62) do not.
    path = tmp_path / "long.yaml"
    path.write_text(GOOD_MODEL.replace("hidden_size: 64", "hidden_size: 131072")
                    .replace("num_attention_heads: 4", "num_attention_heads: 16384")
                    .replace("seq_len: 32", "seq_len: 16777216"))
    code, _, err = run_cli(["inspect", str(path)], capsys)
    assert "seq_len" in _assert_clean(code, err)


@pytest.mark.parametrize("argv", [
    ["estimate", "tiny", "lab-mixed", "--tp", "0"],
    ["estimate", "tiny", "lab-mixed", "--pp", "-1"],
    ["estimate", "tiny", "lab-mixed", "--dp", "0"],
    ["estimate", "tiny", "lab-mixed", "--ep", "0"],
    ["estimate", "tiny", "lab-mixed", "--micro-batch", "0"],
    ["estimate", "tiny", "lab-mixed", "--global-batch", str(10**9)],
    ["estimate", "tiny", "lab-mixed", "--capacity-factor", "nan"],
    ["estimate", "tiny", "lab-mixed", "--tp", "abc"],
    ["plan", "tiny", "lab-mixed", "--global-batch", "-8"],
    ["plan", "tiny", "lab-mixed", "--budget-usd-per-hour", "inf"],
    ["plan", "tiny", "lab-mixed", "--top-k", "0"],
    ["whatif", "tiny", "lab-mixed", "--network-gbps", "nan"],
    ["launch", "plan.json", "--port", "0"],
    ["replan", "plan.json", "--tolerance", "nan"],
    ["dryrun", "plan.json", "--steps", "1000000000"],
    ["estimate", "tiny", "lab-mixed", "--no-such-flag"],
    ["estimate"],
    ["no-such-command"],
])
def test_bad_flags_are_one_usage_line(capsys: pytest.CaptureFixture[str],
                                      argv: list[str]) -> None:
    code, _, err, cpu_s = _timed(argv, capsys)
    line = _assert_clean(code, err)
    assert "--help" in line  # says where to look
    assert cpu_s < 2.0


def test_global_batch_too_many_microbatches(capsys: pytest.CaptureFixture[str]) -> None:
    # 2^20 sequences at micro-batch 1 on one pipeline: 2^20 micro-batches, above 2^16.
    code, _, err = run_cli(["estimate", "tiny", "lab-mixed", "--dp", "1", "--global-batch",
                            str(2**20)], capsys)
    assert "micro-batches per pipeline" in _assert_clean(code, err)


def test_global_batch_limit_in_model_file(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_MODEL.replace("global_batch_size: 8", f"global_batch_size: {10**9}"))
    code, _, err = run_cli(["inspect", str(path)], capsys)
    assert f"{MAX_GLOBAL_BATCH:,}" in _assert_clean(code, err)


def _plan_file(tmp_path: Path) -> Path:
    """A valid plan of tiny on amp-t4 (4 T4s), written as `hetplan plan -o` writes one."""
    from planner.cluster import load_cluster
    from planner.costing import megatron_plan
    from planner.graph import load_model

    path = tmp_path / "plan.json"
    megatron_plan(load_model("tiny"), load_cluster("amp-t4"), tp=1, pp=1, dp=1,
                  micro_batch=1, global_batch=8).save(path)
    return path


@pytest.mark.parametrize("edit,words", [
    (lambda d: d.update(global_batch_size=10**9), "limit"),
    (lambda d: d["pipelines"][0].update(microbatches=10**8), "limit"),
    (lambda d: d["pipelines"][0]["stages"][0].update(tp=0), "tp"),
    (lambda d: d["model"].update(num_layers=10**7), "limit"),
])
def test_bad_numbers_in_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  edit: Callable[[dict], None], words: str) -> None:
    path = _plan_file(tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    for cmd in (["estimate", str(path)], ["simulate", str(path)]):
        code, _, err = run_cli(cmd, capsys)
        assert words in _assert_clean(code, err)


def test_calibration_file_bomb_and_garbage(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("alias bomb", "binary", "duplicate yaml key", "directory"):
        sub = tmp_path / name.replace(" ", "_")
        sub.mkdir()
        path = _make(sub, name)
        code, _, err, cpu_s = _timed(["estimate", "tiny", "lab-mixed", "--calibration",
                                      str(path)], capsys)
        assert "--calibration" in _assert_clean(code, err), name
        assert cpu_s < 2.0


PROFILE_HEADER = ("gpu,model,hidden_size,seq_len,layer_kind,micro_batch,tp,precision,fwd_ms,"
                  "bwd_ms,update_ms,source\n")


def test_user_profile_of_a_shipped_shape_wins(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A `hetplan profile` file for a model the shipped profiles do not name, but whose block
    has the shape of a shipped row (OPT-350M on V100, fp32), is used, not refused."""
    from cost_models.profiles import default_profiles, with_profile_files

    path = tmp_path / "mine.csv"
    path.write_text(PROFILE_HEADER + "V100-SXM2-16GB,my-model,1024,2048,block,1,1,fp32,"
                    "1.5,3.0,,mine\n")
    merged = with_profile_files([path])
    mine = merged.lookup("V100-SXM2-16GB", "my-model", 1024, 2048, "block", 1, "fp32", 1)
    assert mine is not None and (mine.fwd_ms, mine.bwd_ms) == (1.5, 3.0)
    # OPT-350M itself keeps its shipped (named) measurement.
    shipped = default_profiles().lookup("V100-SXM2-16GB", "opt-350m", 1024, 2048, "block", 1,
                                        "fp32", 1)
    kept = merged.lookup("V100-SXM2-16GB", "opt-350m", 1024, 2048, "block", 1, "fp32", 1)
    assert shipped is not None and kept == shipped
    code, _, err = run_cli(["estimate", "opt-350m", "amp-het", "--profiles", str(path)], capsys)
    assert code in (0, 3) and "Traceback" not in err and "error" not in err, err


@pytest.mark.parametrize("rows,words", [
    ("V100-SXM2-16GB,m,1024,2048,block,1,1,fp32,1.5,3.0,,a\n"
     "V100-SXM2-16GB,m,1024,2048,block,1,1,fp32,1.6,3.1,,b\n", "keep one"),
    ("V100-SXM2-16GB,m,1024,2048,block,1,1,fp32,nan,3.0,,a\n", "finite"),
    ("V100-SXM2-16GB,m,1024,2048,block\n", "columns"),
])
def test_bad_profile_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str,
                          words: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(PROFILE_HEADER + rows)
    code, _, err = run_cli(["estimate", "opt-350m", "amp-het", "--profiles", str(path)], capsys)
    assert words in _assert_clean(code, err)


# --- the sweep: every command that reads a file × a handful of bad files -------------------

SWEEP_FILES = ["binary", "directory", "alias bomb", "deep json", "duplicate json key",
               "json list", "empty"]


def _commands(bad: str) -> dict[str, list[str]]:
    return {
        "plan": ["plan", bad, "lab-mixed", "--global-batch", "8"],
        "estimate": ["estimate", bad],
        "simulate": ["simulate", bad],
        "compare": ["compare", bad, "lab-mixed"],
        "whatif": ["whatif", bad, "lab-mixed", "--add", "8 A100"],
        "inspect": ["inspect", bad],
        "dryrun": ["dryrun", bad],
        "launch": ["launch", bad],
        "export": ["export", bad, "--to", "megatron"],
        "replan": ["replan", bad, "--remove", "a100"],
        "validate": ["validate", "--data-dir", bad],
        "calibrate": ["calibrate", bad, "--out", bad + ".out.yaml"],
    }


SWEEP_RESULTS: list[tuple[str, str, bool]] = []


@pytest.mark.parametrize("name", SWEEP_FILES)
@pytest.mark.parametrize("command", list(_commands("x")))
def test_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
               name: str) -> None:
    suffix, _ = BAD_FILES[name]
    path = _make(tmp_path, name)
    if suffix == ".yaml" and command in ("estimate", "simulate", "dryrun", "launch", "export",
                                         "replan"):
        path = path.rename(path.with_suffix(".json")) if path.is_file() else path
    code, _, err, cpu_s = _timed(_commands(str(path))[command], capsys)
    _assert_clean(code, err)
    assert cpu_s < 2.0, (command, name, cpu_s)
