"""`hetplan profile`: the timing harness, measured layer rows, and using them via --profiles.

Oracles: a scripted clock for the harness (known durations, so the median is known); the
profile file itself for the estimate (a stage's forward is the sum of its layers' rows).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cost_models.catalog import get_gpu
from cost_models.profiles import ProfileSet, read_profile_csv
from planner.graph.spec import ModelSpec
from planner.profiler import KINDS, profile_layers, profile_rows, time_median_s, write_profile_csv
from tests.cli import run_cli

TINY = {"name": "tiny-prof", "architecture": "gpt", "hidden_size": 64, "num_layers": 3,
        "num_attention_heads": 4, "vocab_size": 96, "seq_len": 16,
        "training": {"global_batch_size": 8, "precision": "bf16"}}


def test_harness_keeps_the_median_of_the_timed_calls_only() -> None:
    # The clock is read twice per call; call i takes durations[i] seconds.
    durations = [9.0, 9.0, 3.0, 1.0, 2.0]  # two warm-up calls, then 3, 1, 2
    ticks, now = [], 0.0
    for d in durations:
        ticks += [now, now + d]
        now += d + 100.0
    clock = iter(ticks).__next__
    calls: list[str] = []
    median = time_median_s(lambda arg: calls.append(f"op {arg}"),
                           setup=lambda: calls.append("setup") or len(calls),
                           warmup=2, repeats=3, sync=lambda: None, clock=clock)
    assert median == 2.0
    assert calls.count("setup") == 5 and len(calls) == 10  # setup before every call
    with pytest.raises(ValueError, match="repeats"):
        time_median_s(lambda _: None, warmup=0, repeats=0, sync=lambda: None)


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    spec = ModelSpec.from_dict(TINY)
    a100 = get_gpu("A100-SXM4-80GB")
    torch.manual_seed(0)
    timings = profile_layers(spec, device=torch.device("cpu"), gpu=a100, micro_batches=[2, 1],
                             precision="fp32", warmup=0, repeats=1)
    path = tmp_path_factory.mktemp("prof") / "tiny.csv"
    write_profile_csv(profile_rows(timings, spec, a100, "fp32", "test"), path)
    return path, timings


def test_profile_measures_every_layer_kind_at_every_micro_batch(tiny_profile) -> None:
    path, timings = tiny_profile
    assert [(t.kind, t.micro_batch) for t in timings] == [(k, b) for b in (1, 2) for k in KINDS]
    assert all(min(t.fwd_ms, t.bwd_ms, t.update_ms) > 0 for t in timings)
    assert all(min(t.analytic_fwd_ms, t.analytic_bwd_ms) > 0 for t in timings)
    rows = read_profile_csv(path)
    assert [(r.layer_kind, r.micro_batch, r.tp, r.precision, r.gpu) for r in rows] == [
        (k, b, 1, "fp32", "A100-SXM4-80GB") for b in (1, 2) for k in KINDS]
    hit = ProfileSet(rows).lookup("A100-SXM4-80GB", "tiny-prof", 64, 16, "block", 1, "fp32", 2)
    block2 = next(t for t in timings if (t.kind, t.micro_batch) == ("block", 2))
    assert hit.fwd_ms == pytest.approx(block2.fwd_ms, abs=1e-4)


def test_estimate_with_profile_file_sums_the_files_rows(tiny_profile, tmp_path, capsys) -> None:
    path, _ = tiny_profile
    model = tmp_path / "tiny.yaml"
    model.write_text(json.dumps({**TINY, "training": {"global_batch_size": 8,
                                                      "precision": "fp32"}}))
    code, out, err = run_cli(["estimate", str(model), "dgx-a100", "--dp", "8",
                              "--profiles", str(path), "--json"], capsys)
    assert code == 0, err
    rows = {r.layer_kind: r for r in read_profile_csv(path) if r.micro_batch == 1}
    expected = rows["embedding"].fwd_ms + 3 * rows["block"].fwd_ms + rows["head"].fwd_ms
    assert json.loads(out)["stages"][0]["fwd_ms"] == pytest.approx(expected, rel=1e-6)
    code, out, _ = run_cli(["estimate", str(model), "dgx-a100", "--dp", "8", "--json"], capsys)
    assert json.loads(out)["stages"][0]["fwd_ms"] != pytest.approx(expected, rel=1e-3)


def test_profile_cli_writes_a_file_and_explains_bad_input(tmp_path, capsys) -> None:
    model = tmp_path / "tiny.yaml"
    model.write_text(json.dumps(TINY))
    out_csv = tmp_path / "p.csv"
    code, out, err = run_cli(["profile", str(model), "--device", "cpu", "--gpu", "A100",
                              "--micro-batches", "1", "--warmup", "0", "--repeats", "1",
                              "--out", str(out_csv), "--json"], capsys)
    assert code == 0, err
    assert [x["kind"] for x in json.loads(out)["layers"]] == list(KINDS)
    assert len(read_profile_csv(out_csv)) == 3
    for argv, message in (
        (["--device", "cpu"], "--gpu NAME"),
        (["--device", "cpu", "--gpu", "Z999"], "unknown GPU type"),
        (["--device", "cpu", "--gpu", "A100", "--micro-batches", "0,x"], "--micro-batches"),
    ):
        code, _, err = run_cli(["profile", str(model), *argv], capsys)
        assert code == 2 and err.count("\n") == 1 and message in err, err
    if not torch.cuda.is_available():
        code, _, err = run_cli(["profile", str(model)], capsys)
        assert code == 2 and "no CUDA device" in err
    code, _, err = run_cli(["plan", str(model), "dgx-a100", "--profiles",
                            str(tmp_path / "missing.csv")], capsys)
    assert code == 2 and "no such" in err and "missing.csv" in err
