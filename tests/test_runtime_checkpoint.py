"""Checkpoints that survive a change of plan, and the training entry point's data, lr schedule
and resume.

Every figure is checked against a one-process run of the whole model written out here
(AdamW on the same batches, never interrupted), not against numbers the runtime produced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from planner.runtime.data import synthetic_batch
from planner.runtime.data_file import TokenData
from planner.runtime.dry_run import dryrun, tiny_spec
from planner.runtime.local import WorkerError
from planner.runtime.lr_schedule import LrSchedule
from planner.runtime.stage import chain_of, loss_of
from planner.schema import Plan
from tests.cli import run_cli
from tests.test_runtime_plans import make_plan, stage


def _model(name: str = "tiny") -> dict[str, Any]:
    return load_model_spec(name).model_dump(mode="json")


def _plan_file(plan: Any, path: Path) -> Path:
    """`plan` as a file the CLI accepts: on one 8-GPU A100 node."""
    data = plan.to_dict()
    data["cluster"] = {"name": "box", "nodes": [
        {"name": "cpu", "count": 1, "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
         "intra_node": "nvlink", "inter_node_gbps": 100}]}
    for pipe in data["pipelines"]:
        for st in pipe["stages"]:
            st["gpu"] = "A100-SXM4-80GB"
    path.write_text(json.dumps(data))
    return path


def _uninterrupted(model: Any, batches: list[tuple[torch.Tensor, torch.Tensor]],
                   lrs: list[float]) -> list[float]:
    """Losses of plain one-process AdamW training (the runtime's settings: weight decay 0.01)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lrs[0], weight_decay=0.01, foreach=False)
    losses = []
    for (x, y), lr in zip(batches, lrs, strict=True):
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        for m in chain_of(model):
            x = m(x)
        loss = loss_of(model)(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_a_checkpoint_moves_across_tp_pp_dp_and_zero1(tmp_path: Path, capsys) -> None:
    # Three plans of one model, each resuming the one before: TP 2 × PP 2 (DTensor shards,
    # no ZeRO) -> DP 2 of PP 1 (TP 2) and PP 2 (TP 2 -> 1) with ZeRO-2 -> DP 2 × PP 2 with
    # ZeRO-3. Every resumed step matches an uninterrupted run's loss and gradients.
    model = _model()
    tp_pp = make_plan([{"microbatches": 4, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2, 3])]}],
                      model=model)
    # ZeRO-2 on the slices both ways: layers 0..2 are held at TP 2 by both pipelines (slices
    # of TP shards), layers 3..5 at TP 2 and TP 1 (slices of the whole tensor, DTensors on
    # ranks 0 and 1); gradients reduce-scattered onto the slices.
    dp_tp_data = make_plan([{"microbatches": 2, "stages": [stage(0, 6, [0, 1])]},
                            {"microbatches": 2, "stages": [stage(0, 3, [2, 3]), stage(3, 6, [4])]}],
                           model=model, zero1=True).to_dict()
    dp_tp_data["zero"] = 2
    dp_tp_zero = Plan.from_dict(dp_tp_data)
    # ZeRO-3: FSDP2 over a (dp 2, tp 2) mesh, the tied embedding/head on ZeRO-2 slices; its
    # global batch is 6 sequences, not 4.
    fsdp = make_plan([{"microbatches": 3, "stages": [stage(0, 3, [3 * p, 3 * p + 1]),
                                                     stage(3, 6, [3 * p + 2])]} for p in range(2)],
                     model=model, zero1=True).to_dict()
    fsdp["zero"] = 3
    fsdp_plan = Plan.from_dict(fsdp)
    ck1, ck2 = tmp_path / "a", tmp_path / "b"
    first = dryrun(tp_pp, steps=2, save_checkpoint=str(ck1))
    second = dryrun(dp_tp_zero, steps=2, resume=str(ck1), save_checkpoint=str(ck2))
    c_json = _plan_file(fsdp_plan, tmp_path / "c.json")
    code, text, err = run_cli(["dryrun", str(c_json), "--resume", str(ck2), "--steps", "2",
                               "--json"], capsys)
    assert code == 0, err
    third = json.loads(text)
    assert third["first_step"] == 4 and third["ok"] and third["params_checked"] == 68
    assert third["max_grad_diff"] <= 1e-5
    meta = json.loads((ck2 / "step-00000004" / "hetplan-checkpoint.json").read_text())
    assert meta["step"] == 4 and meta["samples"] == 16 and meta["history"] == [[2, 4], [2, 4]]
    assert meta["plan"]["zero"] == 2 and "zero1" not in meta["plan"] and meta["model"] == model
    for res in (first, second):
        assert res.ok and res.params_checked == 68
        assert res.max_grad_diff <= 1e-5

    spec = tiny_spec(model, tp_pp)
    batches = [synthetic_batch(s, 4 if s < 4 else 6, spec.seq_len, spec.vocab_size)
               for s in range(6)]
    want = _uninterrupted(build_model(spec, device="cpu"), batches, [1e-4] * 6)
    got = [*first.losses, *second.losses, *third["losses"]]
    assert np.allclose(got, want, atol=1e-5, rtol=0)
    assert np.allclose([*second.reference_losses, *third["reference_losses"]], want[2:],
                       atol=1e-5, rtol=0)

    # A checkpoint whose data files were cut short: one line naming it, from the worker.
    for f in (ck1 / "step-00000002").glob("*.distcp"):
        f.write_bytes(b"")
    with pytest.raises(WorkerError, match=r"HetplanError: --resume .*step-00000002: cannot load"):
        dryrun(make_plan([{"microbatches": 4, "stages": [stage(0, 6, [0])]}], model=model),
               steps=1, resume=str(ck1))


def test_resuming_another_model_is_one_error_line(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "ck" / "step-00000002"
    folder.mkdir(parents=True)
    (folder / "hetplan-checkpoint.json").write_text(json.dumps(
        {"schema": "hetplan.checkpoint/v1", "step": 2, "model": _model("tiny-llama")}))
    (tmp_path / "ck" / "latest").write_text("step-00000002\n")
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 6, [0])]}], model=_model())
    path = _plan_file(plan, tmp_path / "plan.json")
    code, _, err = run_cli(["dryrun", str(path), "--resume", str(tmp_path / "ck")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "holds model tiny-llama" in err and "this plan trains tiny" in err
    code, _, err = run_cli(["dryrun", str(path), "--resume", str(tmp_path)], capsys)
    assert code == 2 and "no hetplan checkpoint there" in err
    # The plan's model, but saved by a training run at full size: dryrun runs a tiny width.
    (folder / "hetplan-checkpoint.json").write_text(json.dumps(
        {"schema": "hetplan.checkpoint/v1", "step": 2, "model": _model(), "runs": None}))
    code, _, err = run_cli(["dryrun", str(path), "--resume", str(folder)], capsys)
    assert code == 2 and "resumes only checkpoints that dryrun saved" in err


def test_lr_schedule_follows_the_closed_form() -> None:
    s = LrSchedule(peak_lr=1e-3, min_lr=1e-4, warmup_steps=4, decay_steps=14)
    assert [s.lr_at(i) for i in range(4)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert s.lr_at(4) == pytest.approx(1e-3)                 # cos(0): the peak
    assert s.lr_at(9) == pytest.approx((1e-3 + 1e-4) / 2)    # half-way: cos(π/2) = 0
    assert s.lr_at(14) == s.lr_at(100) == pytest.approx(1e-4)
    assert LrSchedule(peak_lr=3e-4).lr_at(7) == 3e-4
    with pytest.raises(ValueError, match="decay steps 4 must exceed warm-up steps 4"):
        LrSchedule(peak_lr=1e-3, min_lr=0.0, warmup_steps=4, decay_steps=4)


def test_token_files_are_read_sequentially_across_files(tmp_path: Path) -> None:
    stream = np.arange(1000, 1000 + 301, dtype=np.uint32)
    (tmp_path / "d").mkdir()
    stream[:100].tofile(tmp_path / "d" / "a.bin")   # the windows span the two files
    stream[100:].tofile(tmp_path / "d" / "b.bin")
    data = TokenData(tmp_path / "d", seq_len=10, dtype="uint32", seed=3)
    assert data.windows == 30
    x, y = data.batch(consumed=5, rows=2)
    for row, j in enumerate((5, 6)):
        w = (data.start + j) % 30
        window = stream[w * 10:w * 10 + 11].astype(np.int64)
        assert x[row].tolist() == window[:-1].tolist() and y[row].tolist() == window[1:].tolist()
    wrapped, _ = data.batch(consumed=30 + 5, rows=1)
    assert wrapped[0].tolist() == x[0].tolist()       # the next epoch repeats the order
    from planner.errors import HetplanError

    whole = TokenData(tmp_path / "d", seq_len=300, dtype="uint32", vocab_size=1300)
    with pytest.raises(HetplanError, match="token id 1300 is outside the model's vocabulary"):
        whole.batch(0, 1)  # one window: the whole stream, up to id 1300
    (tmp_path / "odd.bin").write_bytes(b"\0\0\0")
    with pytest.raises(HetplanError, match="not a whole number of uint16 tokens"):
        TokenData(tmp_path / "odd.bin", seq_len=4)


def _train_worker(rank: int, world: int, store_dir: str, plan_dict: dict,
                  kwargs: dict[str, Any]) -> list[float]:
    from planner.runtime.local import init_world
    from planner.runtime.training import train
    from planner.schema import Plan

    init_world(store_dir, "train", rank, world)
    data = TokenData(**kwargs.pop("data"))
    return list(train(Plan.from_dict(plan_dict), data_loader=data, log=None, **kwargs).losses)


def test_train_on_a_token_file_with_a_schedule_saves_and_resumes(tmp_path: Path) -> None:
    # The runtime's own training loop (what `python -m planner.runtime` runs): token file,
    # warm-up + cosine lr, a checkpoint every 2 steps; PP 2 trains 3 steps, DP 2 resumes the
    # step-2 checkpoint for steps 3 and 4. Both follow one uninterrupted run.
    from planner.runtime.local import run_local

    spec = load_model_spec("tiny")
    tokens = np.random.default_rng(7).integers(0, spec.vocab_size, 3000).astype(np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    data = {"path": str(tmp_path / "train.bin"), "seq_len": spec.seq_len,
            "vocab_size": spec.vocab_size, "seed": 5}
    schedule = LrSchedule(peak_lr=1e-3, min_lr=1e-4, warmup_steps=1, decay_steps=4)
    model = spec.model_dump(mode="json")
    pp = make_plan([{"microbatches": 2, "stages": [stage(0, 3, [0]), stage(3, 6, [1])]}],
                   model=model)
    dp = make_plan([{"microbatches": 1, "stages": [stage(0, 6, [0])]},
                    {"microbatches": 1, "stages": [stage(0, 6, [1])]}], model=model)
    ck = tmp_path / "ck"
    # Resuming from its own, still empty, save folder: a fresh start (what a restarted job
    # relies on to pick up its latest checkpoint).
    first = run_local(_train_worker, 2, pp.to_dict(), {
        "steps": 3, "data": dict(data), "lr": 1e-3, "lr_schedule": schedule,
        "save_checkpoint": str(ck), "save_every": 2, "resume": str(ck)})[0]
    assert sorted(p.name for p in ck.iterdir()) == ["latest", "step-00000002", "step-00000003"]
    assert (ck / "latest").read_text().strip() == "step-00000003"
    second = run_local(_train_worker, 2, dp.to_dict(), {
        "steps": 2, "data": dict(data), "lr": 1e-3, "lr_schedule": schedule,
        "resume": str(ck / "step-00000002")})[0]

    source = TokenData(**data)
    batches = [source.batch(2 * s, 2) for s in range(4)]
    want = _uninterrupted(build_model(spec, device="cpu"), batches,
                          [schedule.lr_at(s) for s in range(4)])
    assert np.allclose(first, want[:3], atol=1e-5, rtol=0)
    assert np.allclose(second, want[2:], atol=1e-5, rtol=0)


def test_entry_point_and_launch_pass_the_training_flags(tmp_path: Path, capsys) -> None:
    from planner.runtime.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["plan.json", "--save-every", "2"])
    assert exc.value.code == 2 and "--save-every N needs" in capsys.readouterr().err
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 6, [0])]}], model=_model())
    path = _plan_file(plan, tmp_path / "plan.json")
    code, _, err = run_cli(["launch", str(path), "--out-dir", str(tmp_path / "l"), "--data",
                            "/data/my tokens.bin", "--lr", "3e-4", "--min-lr", "3e-5",
                            "--warmup-steps", "10", "--save-checkpoint", "/ck",
                            "--save-every", "50", "--resume", "/ck"], capsys)
    assert code == 0, err
    script = (tmp_path / "l" / "cpu.sh").read_text()
    for line in ("--data '/data/my tokens.bin'", "--data-dtype uint16", "--lr 0.0003",
                 "--min-lr 3e-05", "--warmup-steps 10", "--save-checkpoint /ck",
                 "--save-every 50", "--resume /ck"):
        assert f"  {line}" in script
    code, _, err = run_cli(["launch", str(path), "--out-dir", str(tmp_path / "m"),
                            "--save-every", "5"], capsys)
    assert code == 2 and "--save-every needs --save-checkpoint" in err
