"""Profiles: file format, interpolation, precedence over the analytic model, shipped files."""

from __future__ import annotations

from pathlib import Path

import pytest

from cost_models.profiles import (
    ProfileRow,
    ProfileSet,
    default_profiles,
    read_profile_csv,
    with_profile_files,
)
from planner.costing.stage_cost import stage_cost
from tests.test_cost_fixtures import gpt_graph, gpu

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _row(mb: int, fwd: float, bwd: float, tp: int = 1, kind: str = "block") -> ProfileRow:
    return ProfileRow(gpu="TEST-GPU", model="toy-gpt", hidden_size=1024, seq_len=1024,
                      layer_kind=kind, micro_batch=mb, tp=tp, precision="bf16", fwd_ms=fwd,
                      bwd_ms=bwd, update_ms=0.5, source="test")


def test_linear_interpolation_between_measured_micro_batches() -> None:
    p = ProfileSet([_row(2, 10.0, 20.0), _row(8, 40.0, 80.0)])
    hit = p.lookup("TEST-GPU", "toy-gpt", 1024, 1024, "block", 1, "bf16", 4)
    assert (hit.fwd_ms, hit.bwd_ms, hit.micro_batch) == (20.0, 40.0, 4)
    # Outside the range: the nearest measured size, for the caller to scale.
    assert p.lookup("TEST-GPU", "toy-gpt", 1024, 1024, "block", 1, "bf16", 16).micro_batch == 8
    # fp16 and bf16 run the same kernels; another TP degree or GPU does not match.
    assert p.lookup("TEST-GPU", "toy-gpt", 1024, 1024, "block", 1, "fp16", 2).fwd_ms == 10.0
    assert p.lookup("TEST-GPU", "toy-gpt", 1024, 1024, "block", 1, "fp32", 2) is None
    assert p.lookup("OTHER", "toy-gpt", 1024, 1024, "block", 1, "bf16", 2) is None


def test_profile_overrides_analytic_time_at_measured_point() -> None:
    graph = gpt_graph(layers=2)
    rows = [_row(2, 10.0, 20.0), _row(2, 1.0, 2.0, kind="embedding"),
            _row(2, 5.0, 7.0, kind="head")]
    cost = stage_cost(graph, 0, 4, gpu(), 1, 2, "none", precision="bf16",
                      profiles=ProfileSet(rows))
    assert cost.fwd_s == pytest.approx((1.0 + 2 * 10.0 + 5.0) / 1e3)
    assert cost.bwd_s == pytest.approx((2.0 + 2 * 20.0 + 7.0) / 1e3)
    assert cost.optimizer_step_s > 0


def test_extrapolation_follows_the_analytic_shape() -> None:
    graph = gpt_graph(layers=1)
    none = ProfileSet()
    prof = ProfileSet([_row(1, 10.0, 20.0)])
    a1 = stage_cost(graph, 1, 2, gpu(), 1, 1, "none", precision="bf16", profiles=none)
    a4 = stage_cost(graph, 1, 2, gpu(), 1, 4, "none", precision="bf16", profiles=none)
    p4 = stage_cost(graph, 1, 2, gpu(), 1, 4, "none", precision="bf16", profiles=prof)
    assert p4.fwd_s == pytest.approx(10e-3 * a4.fwd_s / a1.fwd_s)


def test_bad_profile_file_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "p.csv"
    f.write_text("gpu,model,hidden_size,seq_len,layer_kind,micro_batch,tp,precision,fwd_ms,"
                 "bwd_ms,update_ms,source\nT4,m,1024,1024,block,one,1,fp16,1,2,,x\n")
    with pytest.raises(ValueError, match=r"p\.csv: line 2"):
        read_profile_csv(f)
    g = tmp_path / "q.csv"
    g.write_text("gpu,model\nT4,m\n")
    with pytest.raises(ValueError, match="missing profile columns"):
        read_profile_csv(g)


def test_shipped_profiles_load_sailor_and_amp() -> None:
    p = default_profiles()
    hit = p.lookup("GH200-96GB", "opt-350m", 1024, 2048, "block", 4, "fp32", 8)
    assert (hit.fwd_ms, hit.bwd_ms) == (3.021, 6.469)  # sailor_layer_profiles.csv row
    amp = p.lookup("T4", "gpt2-amp", 1024, 1024, "block", 1, "fp16", 1)
    assert amp.fwd_ms == 5.47  # amp_layer_profiles.csv, TP 1 mean layer forward


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is absent")
def test_converter_reproduces_the_shipped_files(tmp_path: Path) -> None:
    from cost_models.profile_convert import convert_amp, convert_sailor

    sailor = convert_sailor(SHARED / "sailor_layer_profiles.csv")
    amp = convert_amp(SHARED / "amp_layer_profiles.csv")
    shipped = Path(__file__).resolve().parents[1] / "cost_models" / "profiles"
    assert len(sailor) == len(read_profile_csv(shipped / "sailor.csv"))
    assert len(amp) == len(read_profile_csv(shipped / "amp.csv"))


def test_a_profile_file_replaces_the_shipped_curve_it_matches(tmp_path) -> None:
    shipped = default_profiles()
    args = ("V100-SXM2-16GB", "opt-350m", 1024, 2048, "block", 1, "fp32")
    before = shipped.lookup(*args, 2)
    assert before is not None
    path = tmp_path / "v100.csv"
    path.write_text("gpu,model,hidden_size,seq_len,layer_kind,micro_batch,tp,precision,fwd_ms,"
                    "bwd_ms,update_ms,source\nV100,OPT-350M,1024,2048,block,1,1,fp32,1.5,3.0,,"
                    "mine\n")
    merged = with_profile_files([path])
    # The file's single point is the whole curve now: mb 2 scales from it (nearest point).
    hit = merged.lookup(*args, 2)
    assert (hit.fwd_ms, hit.micro_batch) == (1.5, 1)
    # Other curves stay as shipped.
    emb = ("V100-SXM2-16GB", "opt-350m", 1024, 2048, "embedding", 1, "fp32", 1)
    assert merged.lookup(*emb) == shipped.lookup(*emb)
    assert len(with_profile_files([path], shipped=False)) == 1


def test_profile_rows_are_validated(tmp_path) -> None:
    head = ("gpu,model,hidden_size,seq_len,layer_kind,micro_batch,tp,precision,fwd_ms,bwd_ms,"
            "update_ms,source\n")
    for line, message in (("A100,m,64,16,blocks,1,1,bf16,1,2,,x", "layer_kind 'blocks'"),
                          ("A100,m,64,16,block,0,1,bf16,1,2,,x", "micro_batch and tp"),
                          ("A100,m,64,16,block,1,1,bf16,fast,2,,x", "line 2")):
        path = tmp_path / "bad.csv"
        path.write_text(head + line + "\n")
        with pytest.raises(ValueError, match=message):
            read_profile_csv(path)


def test_a_profile_file_naming_an_unknown_gpu_is_refused(tmp_path) -> None:
    path = tmp_path / "typo.csv"
    path.write_text("gpu,model,hidden_size,seq_len,layer_kind,micro_batch,tp,precision,fwd_ms,"
                    "bwd_ms,update_ms,source\nH100-SXM9,m,64,16,block,1,1,bf16,1,2,,x\n")
    with pytest.raises(ValueError, match="line 2: GPU 'H100-SXM9' is not in the catalog"):
        with_profile_files([path])
