"""`hetplan dryrun` guards: a failing, killed or stalled worker is one line naming the rank
(found in seconds, not minutes); the run's host memory is estimated before any worker
starts and a run that cannot fit is refused; the chunked reference equals the whole one."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from planner.cluster import load_cluster
from planner.costing import megatron_plan
from planner.graph import load_model
from planner.graph.load_spec import load_model_spec
from planner.models import build_model
from planner.runtime import check
from planner.runtime.check import _reference_step
from planner.runtime.engine import make_optimizer
from tests.cli import run_cli as _run


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    plan = megatron_plan(load_model("tiny"), load_cluster("lab-mixed"), tp=1, pp=2, dp=1,
                         micro_batch=1, global_batch=4)
    path = tmp_path_factory.mktemp("dry") / "plan.json"
    plan.save(path)
    return path


def _raises(rank, world, store_dir, *args):
    if rank == 1:
        raise ValueError("stage 1 cannot build\nsecond line of the message")
    time.sleep(30)


def _killed(rank, world, store_dir, *args):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does
    time.sleep(30)


def _stalls(rank, world, store_dir, *args):
    time.sleep(600 if rank == 1 else 0.1)  # rank 0 returns; rank 1 never reports


@pytest.mark.parametrize(("worker", "words"), [
    (_raises, "rank 1 failed: ValueError: stage 1 cannot build"),
    (_killed, "rank 1 was killed by SIGKILL (out of memory?"),
    (_stalls, "no progress for 2 s: rank(s) [1] went quiet first"),
])
def test_a_failing_worker_is_one_line_naming_its_rank(worker, words, plan_file, monkeypatch,
                                                      capsys) -> None:
    monkeypatch.setattr(check, "_worker", worker)
    start = time.monotonic()
    code, _, err = _run(["dryrun", str(plan_file), "--timeout-s", "2"], capsys)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("error: dryrun failed: "), err
    assert words in err, err
    assert time.monotonic() - start < 25  # every other worker was stopped at once


def test_memory_is_estimated_and_a_run_that_cannot_fit_is_refused(plan_file, monkeypatch,
                                                                  capsys) -> None:
    def never(*args, **kwargs):
        raise AssertionError("no worker may start")

    monkeypatch.setattr(check, "run_local", never)
    code, _, err = _run(["dryrun", str(plan_file), "--memory-gib", "0.2"], capsys)
    assert code == 3 and err.count("\n") == 1, err
    assert "dryrun needs about" in err and "(2 workers × " in err and "0.2 GiB is available" \
        in err


def test_the_estimate_grows_with_what_the_workers_hold(tmp_path: Path) -> None:
    from planner.runtime.dry_memory import BASE_BYTES, dryrun_memory, fp32_graph
    from planner.runtime.dry_run import shrink_plan, tiny_spec
    from planner.schema import Plan

    def need(layers: int, microbatches: int, schedule: str) -> float:
        model = load_model_spec("tiny").replace(num_layers=layers)
        plan = megatron_plan(load_model(model), load_cluster("lab-mixed"), tp=1, pp=2, dp=1,
                             micro_batch=1, global_batch=microbatches, schedule=schedule)
        small, _ = shrink_plan(Plan.from_dict(plan.to_dict()))
        return dryrun_memory(small, fp32_graph(tiny_spec(plan.model, small))).per_worker_bytes

    assert need(4, 4, "1f1b") > BASE_BYTES
    assert need(40, 4, "1f1b") > need(4, 4, "1f1b")          # deeper: more to hold
    assert need(4, 64, "gpipe") > need(4, 64, "1f1b")        # GPipe keeps every micro-batch
    assert need(4, 64, "1f1b") == pytest.approx(need(4, 8, "1f1b"), rel=0.25)  # chunked ref


def test_chunked_reference_equals_the_whole_batch() -> None:
    spec = load_model_spec("tiny")
    torch.manual_seed(1)  # the same batch every run: no draw-dependent rounding
    inputs = torch.randint(0, spec.vocab_size, (6, spec.seq_len))
    labels = torch.randint(0, spec.vocab_size, (6, spec.seq_len))
    grads, losses = [], []
    for chunk in (None, 4, 1):
        torch.manual_seed(0)
        model = build_model(spec, device="cpu")
        opt = make_optimizer(list(model.parameters()), "adamw", 1e-4)
        losses.append(_reference_step(model, opt, inputs, labels, chunk))
        grads.append([p.grad.clone() for p in model.parameters()])
    for other, loss in zip(grads[1:], losses[1:], strict=True):
        # fp32: a mean over other chunkings differs by rounding, ~1e-7 of the value.
        assert loss == pytest.approx(losses[0], rel=1e-6)
        assert max(float((a - b).abs().max()) for a, b in zip(grads[0], other, strict=True)) \
            < 1e-6


def test_dryrun_json_reports_its_memory_note(plan_file, capsys) -> None:
    code, out, err = _run(["dryrun", str(plan_file), "--json", "--steps", "1"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["ok"] is True
    assert any(n.startswith("memory: about ") for n in res["notes"])


def test_the_first_worker_to_fail_is_named_not_the_peers_it_took_down() -> None:
    # Rank 2 failed first; rank 0's collective then lost its peer. Both reached the parent in
    # one drain (arrival order kept): the line names rank 2's own error.
    from planner.runtime.local import WorkerError, _raise_reported

    got = {1: ("ok", None),
           2: ("error", ("RuntimeError: source tensor shape must match", "tb2")),
           0: ("error", ("RuntimeError: Connection closed by peer [127.0.0.1]:46472", "tb0"))}
    with pytest.raises(WorkerError, match=r"^rank 2 failed: RuntimeError: source tensor"):
        _raise_reported(got)


def _killed_then_echoed(rank: int, world: int, store_dir: str) -> None:
    from planner.runtime.local import init_world

    init_world(store_dir, "pg", rank, world, timeout_s=20)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does: no report
    # Rank 0's collective loses its peer ("Connection closed by peer") and reports that error
    # to the parent, while rank 1 never reports.
    torch.distributed.all_reduce(torch.ones(1))


def test_a_worker_killed_by_a_signal_is_named_not_the_peer_it_took_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.runtime import local
    from planner.runtime.local import WorkerError, run_local

    with pytest.raises(WorkerError, match=r"^rank 1 was killed by SIGKILL"):
        run_local(_killed_then_echoed, 2, timeout_s=30)
    # A busy parent (a loaded machine) looks only after both happened: rank 1's death and
    # rank 0's report of the lost connection are both there at its first look.
    start = local.mp.start_processes

    def busy_parent(*args: object, **kwargs: object) -> object:
        procs = start(*args, **kwargs)
        time.sleep(2.0)
        return procs

    monkeypatch.setattr(local.mp, "start_processes", busy_parent)
    with pytest.raises(WorkerError, match=r"^rank 1 was killed by SIGKILL"):
        run_local(_killed_then_echoed, 2, timeout_s=30)
