"""`hetplan launch`: all-or-nothing folders, c10d rendezvous with restarts, hostfile, ssh and
Slurm scripts (run with a stub torchrun), and one real two-node c10d run on this CPU."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli import run_cli as _run

ROOT = Path(__file__).resolve().parents[1]


def _two_node_plan(tmp_path: Path) -> Path:
    """tiny on two 1-GPU T4 boxes; plan rank 0 on node `b`, rank 1 on node `a`."""
    from planner.graph.load_spec import load_model_spec

    data = {
        "schema": "hetplan.plan/v1",
        "model": load_model_spec("tiny").model_dump(mode="json"),
        "cluster": {"name": "two-boxes", "nodes": [
            {"name": n, "count": 1, "gpu": "T4", "gpus_per_node": 1, "intra_node": "pcie",
             "inter_node_gbps": 50} for n in ("a", "b")]},
        "global_batch_size": 2, "micro_batch_size": 1, "schedule": "1f1b",
        "pipelines": [{"microbatches": 2, "stages": [
            {"layers": [0, 3], "gpu": "T4", "tp": 1, "ranks": [0]},
            {"layers": [3, 6], "gpu": "T4", "tp": 1, "ranks": [1]}]}],
        "ranks": [{"rank": 0, "node": "b", "local_rank": 0},
                  {"rank": 1, "node": "a", "local_rank": 0}],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def test_out_dir_is_replaced_whole_and_foreign_folders_are_refused(tmp_path: Path,
                                                                   capsys) -> None:
    plan = _two_node_plan(tmp_path)
    (tmp_path / "deep").mkdir()
    out = tmp_path / "deep" / "launch"
    code, _, err = _run(["launch", str(plan), "--out-dir", str(out)], capsys)
    assert code == 0, err
    assert {"a.sh", "b.sh", "plan.json", "ranks.tsv", "hosts.tsv", "run_ssh.sh",
            "hetplan.sbatch", "slurm_node.sh", ".hetplan-launch"} == {
                p.name for p in out.iterdir()}
    # A script of an older plan in the folder is gone after the next launch.
    (out / "old-node.sh").write_text("#!/bin/sh\n")
    code, _, err = _run(["launch", str(plan), "--out-dir", str(out)], capsys)
    assert code == 0, err
    assert not (out / "old-node.sh").exists()
    assert [p.name for p in out.parent.iterdir()] == ["launch"]  # no temporary folders left
    # Someone else's folder, a file, a path under a file: one line each, nothing touched.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, words in ((mine, "hetplan did not write"), (afile, "is a file"),
                          (afile / "sub", "is a file")):
        code, _, err = _run(["launch", str(plan), "--out-dir", str(target)], capsys)
        assert code == 2 and err.count("\n") == 1 and words in err, err
    assert (mine / "notes.txt").read_text() == "keep me" and [*mine.iterdir()] == [
        mine / "notes.txt"]
    # A read-only parent: one line, nothing written.
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: permissions are not enforced")
        code, _, err = _run(["launch", str(plan), "--out-dir", str(ro / "l")], capsys)
        assert code == 2 and "cannot write" in err and "nothing was written" in err
        assert not any(ro.iterdir())
    finally:
        ro.chmod(0o755)


def test_a_write_that_fails_midway_leaves_the_old_folder_intact(tmp_path: Path, monkeypatch,
                                                                capsys) -> None:
    plan = _two_node_plan(tmp_path)
    out = tmp_path / "launch"
    code, _, err = _run(["launch", str(plan), "--out-dir", str(out)], capsys)
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = Path.write_text
    written: list[str] = []

    def disk_full(self: Path, text: str, *args, **kwargs) -> int:
        written.append(self.name)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", disk_full)
    code, _, err = _run(["launch", str(plan), "--out-dir", str(out), "--rdzv", "c10d"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "No space left on device" in err and "nothing was written" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".launch")] == []
    # A new folder that fails midway does not appear at all.
    written.clear()
    code, _, _ = _run(["launch", str(plan), "--out-dir", str(tmp_path / "new")], capsys)
    assert code == 2 and not (tmp_path / "new").exists()


def test_missing_parent_folder_is_one_line_before_any_work(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    """As every other output path (planner/outfile.py): the folder is created, its parent
    never is (a mistyped path is an error, not a new tree), and the path is checked before
    the plan is even read."""
    plan = _two_node_plan(tmp_path)

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("launch read the plan before checking --out-dir")

    monkeypatch.setattr("planner.cli.cmd_launch.load_checked", boom)
    missing = tmp_path / "no" / "such"
    code, out, err = _run(["launch", str(plan), "--out-dir", str(missing / "launch")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: --out-dir {missing / 'launch'}: folder {missing} does not "
                          "exist") and f"mkdir -p {missing}" in err
    assert not (tmp_path / "no").exists()


def test_options_and_hostfile_errors_are_one_line(tmp_path: Path, capsys) -> None:
    plan = _two_node_plan(tmp_path)
    out = tmp_path / "l"
    hostfile = tmp_path / "hosts"
    cases = [
        (["--max-restarts", "2"], "--max-restarts needs --rdzv c10d"),
        (["--rdzv", "etcd"], "--rdzv 'etcd'"),
        (["--hostfile", str(tmp_path / "none")], "cannot read"),
    ]
    for text, words in (("a h1\nb\n", ":2: expected `plan-node host`"),
                        ("a h1\nz h2\n", "'z' is not a node of the plan"),
                        ("a h1\nb h1\n", "host h1 already serves another node"),
                        ("a h1\n", "no host for plan node(s) b"),
                        ("a h1\na h2\n", "node a is listed twice")):
        cases.append((["--hostfile", str(hostfile)], words))
        hostfile.write_text(text)
        code, _, err = _run(["launch", str(plan), "--out-dir", str(out), *cases[-1][0]], capsys)
        assert code == 2 and err.count("\n") == 1 and words in err, err
    for argv, words in cases[:3]:
        code, _, err = _run(["launch", str(plan), "--out-dir", str(out), *argv], capsys)
        assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not out.exists()


def _stub_torchrun(bin_dir: Path) -> None:
    bin_dir.mkdir()
    stub = bin_dir / "torchrun"
    stub.write_text('#!/usr/bin/env bash\necho "node=$HETPLAN_NODE rdzv=${HETPLAN_RDZV:-} '
                    'args=$*"\n')
    stub.chmod(0o755)


def test_slurm_and_ssh_scripts_start_the_right_node(tmp_path: Path, capsys) -> None:
    plan = _two_node_plan(tmp_path)
    out = tmp_path / "l"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# plan node, host\nb gpu-b01\na gpu-a07  # the other one\n")
    code, _, err = _run(["launch", str(plan), "--out-dir", str(out), "--rdzv", "c10d",
                         "--max-restarts", "3", "--hostfile", str(hostfile), "--port", "29611"],
                        capsys)
    assert code == 0, err
    for name in ("a.sh", "b.sh", "run_ssh.sh", "slurm_node.sh", "hetplan.sbatch"):
        assert subprocess.run(["bash", "-n", str(out / name)]).returncode == 0, name
    sbatch = (out / "hetplan.sbatch").read_text()
    assert "#SBATCH --nodes=2" in sbatch and "#SBATCH --nodelist=gpu-b01,gpu-a07" in sbatch
    assert (out / "hosts.tsv").read_text() == "node\thost\nb\tgpu-b01\na\tgpu-a07\n"
    ssh = (out / "run_ssh.sh").read_text()
    assert "ssh gpu-b01 \"cd $DIR && ./b.sh gpu-b01 $MASTER_PORT $STEPS\" &" in ssh
    assert "ssh gpu-a07 \"cd $DIR && ./a.sh gpu-b01 $MASTER_PORT $STEPS\" &" in ssh
    # What srun runs on host gpu-a07: node a's script, c10d, rendezvous at node rank 0's host.
    _stub_torchrun(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "SLURMD_NODENAME": "gpu-a07", "HETPLAN_JOB_ID": "job42"}
    run = subprocess.run([str(out / "slurm_node.sh"), "gpu-b01", "29611", "5"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("node=a rdzv=c10d args=--nnodes 2 --nproc-per-node 1 "
                                 "--rdzv-backend c10d --rdzv-endpoint gpu-b01:29611 "
                                 "--rdzv-id job42 --max-restarts 3 -m planner.runtime ")
    assert run.stdout.rstrip().endswith("plan.json --steps 5")
    env["SLURMD_NODENAME"] = "elsewhere"
    run = subprocess.run([str(out / "slurm_node.sh"), "gpu-b01"], env=env, capture_output=True,
                         text=True)
    assert run.returncode == 2 and "host elsewhere serves no node" in run.stderr
    # Without a hostfile the node scripts ask for MASTER_ADDR; with one they default to it.
    assert 'MASTER_ADDR="${1:-gpu-b01}"' in (out / "a.sh").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _module_plan(tmp_path: Path) -> Path:
    """The user's module (tests.user_models) as a 2-stage plan on boxes a and b, plan rank 0
    on node b: a c10d rank order that differs from the plan's must still map right."""
    import planner
    from planner.cluster import cluster_from_dict
    from planner.costing import megatron_plan
    from tests.user_models import S, make_net

    model = planner.from_module(make_net(), torch.zeros(2, S, dtype=torch.long),
                                factory="tests.user_models:make_net")
    data = json.loads(_two_node_plan(tmp_path).read_text())
    cluster = cluster_from_dict(data["cluster"])
    plan = megatron_plan(model, cluster, tp=1, pp=2, dp=1, micro_batch=1, global_batch=2)
    out = plan.to_dict()
    out["ranks"] = [{"rank": 0, "node": "b", "local_rank": 0},
                    {"rank": 1, "node": "a", "local_rank": 0}]
    path = tmp_path / "module-plan.json"
    path.write_text(json.dumps(out))
    return path


def _reference_losses(steps: int) -> list[float]:
    """The module trained in one process as the runtime trains it (AdamW lr 1e-4, synthetic
    tokens of seed 0, the global batch of 2 each step)."""
    from planner.runtime.data import synthetic_batch
    from planner.runtime.engine import make_optimizer
    from tests.user_models import S, V, make_net

    net = make_net()
    opt = make_optimizer(list(net.parameters()), "adamw", 1e-4)
    losses = []
    for step in range(steps):
        x, y = synthetic_batch(step, 2, S, V)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_c10d_scripts_train_a_module_plan_on_two_local_nodes(tmp_path: Path, capsys) -> None:
    # Both node scripts side by side on this machine (gloo): c10d numbers the nodes as they
    # join, the runtime maps torch ranks to plan ranks from HETPLAN_NODE and LOCAL_RANK, and
    # builds the user's module through the plan's factory.
    plan = _module_plan(tmp_path)
    out = tmp_path / "l"
    code, _, err = _run(["launch", str(plan), "--out-dir", str(out), "--rdzv", "c10d"], capsys)
    assert code == 0, err
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "HETPLAN_JOB_ID": "t"}
    port = str(_free_port())
    procs = [subprocess.Popen([str(out / f"{n}.sh"), "127.0.0.1", port, "2"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for n in ("a", "b")]
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    done = re.search(r"done: 2 steps, final loss ([0-9.]+)", "".join(outs))
    assert done, outs
    assert float(done.group(1)) == pytest.approx(_reference_losses(2)[-1], abs=1e-4)


def test_the_worker_entry_point_checks_the_plan_too(tmp_path: Path, capsys) -> None:
    # What each torchrun worker runs: a plan edited after `hetplan launch` is one line, exit 2.
    from planner.runtime.__main__ import main

    data = json.loads(_two_node_plan(tmp_path).read_text())
    data["pipelines"][0]["stages"][1]["layers"] = [3, 7]
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(data))
    assert main([str(bad), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "edited.json: pipelines: stages cover layers [0, 7)" in err
