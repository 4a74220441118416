"""Every file a command writes: its path is checked before the work, and it is written all
or nothing (a failed command leaves the previous file, or none, and no temporary file)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate, megatron_plan, with_prediction
from planner.graph import load_model
from tests.cli import run_cli


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, cluster = load_model("tiny"), load_cluster("dgx-a100")
    plan = megatron_plan(model, cluster, tp=1, pp=2, dp=1, micro_batch=1, global_batch=4)
    path = tmp_path_factory.mktemp("plans") / "tiny.json"
    with_prediction(plan, estimate(model, cluster, plan)).save(path)
    return path


def _boom(*_: object, **__: object) -> None:
    raise AssertionError("the command started its work before checking its output path")


# (argv with OUT where the output path goes, the function doing the command's work).
COMMANDS = {
    "plan -o": (["plan", "tiny", "dgx-a100", "-o", "OUT"], "planner.search.plan"),
    "replan -o": (["replan", "PLAN", "--remove", "dgx-0", "-o", "OUT"],
                  "planner.replanning.replan"),
    "export -o": (["export", "PLAN", "--to", "megatron", "-o", "OUT"],
                  "planner.export.export_plan"),
    "export --nearest-out": (["export", "PLAN", "--to", "megatron", "--nearest-out", "OUT"],
                             "planner.export.export_plan"),
    "calibrate --out": (["calibrate", "runs.csv", "--out", "OUT"],
                        "planner.costing.calibrate.fit"),
    "profile --out": (["profile", "tiny", "--device", "cpu", "--gpu", "T4", "--out", "OUT"],
                      "planner.profiler.profile_layers"),
    "simulate --gantt": (["simulate", "PLAN", "--gantt", "OUT"],
                         "planner.cli.cmd_simulate.simulate_plan"),
    "simulate --svg": (["simulate", "PLAN", "--svg", "OUT"],
                       "planner.cli.cmd_simulate.simulate_plan"),
    "compare --plot": (["compare", "tiny", "dgx-a100", "--plot", "OUT"],
                       "planner.report.compare.compare"),
    "whatif --plot": (["whatif", "tiny", "dgx-a100", "--add", "8 A100", "--plot", "OUT"],
                      "planner.report.whatif.whatif"),
    "whatif --save-cluster": (["whatif", "tiny", "dgx-a100", "--add", "8 A100",
                               "--save-cluster", "OUT"], "planner.report.whatif.whatif"),
}


def _argv(name: str, out: Path, plan: Path) -> list[str]:
    argv, _ = COMMANDS[name]
    suffix = ".svg" if "--svg" in argv else ".png"
    return [str(out.with_suffix(suffix)) if a == "OUT" else str(plan) if a == "PLAN" else a
            for a in argv]


def _refused(name: str, out: Path, plan: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command with work forbidden; return its one error line."""
    monkeypatch.setattr(COMMANDS[name][1], _boom)
    code, stdout, err = run_cli(_argv(name, out, plan), capsys)
    assert code == 2, (stdout, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    flag = COMMANDS[name][0][-2]
    assert flag in err, err
    return err


@pytest.mark.parametrize("name", COMMANDS)
def test_missing_folder_is_one_line_before_any_work(name, plan_json, tmp_path, monkeypatch,
                                                    capsys) -> None:
    err = _refused(name, tmp_path / "no" / "such" / "out", plan_json, monkeypatch, capsys)
    assert "does not exist" in err and str(tmp_path / "no" / "such") in err
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("name", COMMANDS)
def test_folder_as_output_is_one_line_before_any_work(name, plan_json, tmp_path, monkeypatch,
                                                      capsys) -> None:
    target = tmp_path / "out"
    for suffix in (".png", ".svg"):
        target.with_suffix(suffix).mkdir()
    err = _refused(name, target, plan_json, monkeypatch, capsys)
    assert "is a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.png", "out.svg"]
    assert not any(target.with_suffix(".png").iterdir())


@contextlib.contextmanager
def _unprivileged() -> Iterator[None]:
    """Root ignores a folder's permission bits through CAP_DAC_OVERRIDE; drop it (and
    CAP_DAC_READ_SEARCH) from this thread's effective set for the block, so that a chmod-ed
    folder is read-only here as it is for a user."""
    if os.geteuid() != 0:
        yield
        return

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    saved = (Data * 2)()
    if libc.capget(ctypes.byref(header), saved) != 0:
        pytest.skip("cannot read this thread's capabilities")
    reduced = (Data * 2)(*saved)
    reduced[0].effective &= ~((1 << 1) | (1 << 2))  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(header), reduced) != 0:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here")
    try:
        yield
    finally:
        libc.capset(ctypes.byref(header), saved)


@pytest.mark.parametrize("name", COMMANDS)
def test_read_only_folder_is_one_line_before_any_work(name, plan_json, tmp_path, monkeypatch,
                                                      capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with _unprivileged():
            with pytest.raises(PermissionError):
                (ro / "probe").touch()
            err = _refused(name, ro / "out", plan_json, monkeypatch, capsys)
        assert "cannot write in folder" in err and "Permission denied" in err
        assert not any(ro.iterdir())
    finally:
        ro.chmod(0o755)


def _disk_full_in(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the file system under `folder` fill up: a file there takes the first half of
    its first write, then every write fails with ENOSPC. Returns the bytes accepted."""
    real = os.write
    accepted: list[int] = []

    def write(fd: int, data: bytes) -> int:
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = ""
        if not where.startswith(str(folder)):
            return real(fd, data)
        if accepted:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        accepted.append(real(fd, bytes(data[: max(1, len(data) // 2)])))
        return accepted[-1]

    monkeypatch.setattr(os, "write", write)
    return accepted


def _export(plan: Path, out: Path) -> list[str]:
    return ["export", str(plan), "--to", "megatron", "-o", str(out)]


def _gantt(plan: Path, out: Path) -> list[str]:
    return ["simulate", str(plan), "--gantt", str(out)]


@pytest.mark.parametrize(("make_argv", "name"), [(_export, "megatron.sh"), (_gantt, "g.png")])
def test_disk_full_leaves_the_previous_file_and_no_temporary(make_argv, name, plan_json,
                                                             tmp_path, monkeypatch,
                                                             capsys) -> None:
    folder = tmp_path / "outs"
    folder.mkdir()
    target = folder / name
    code, _, err = run_cli(make_argv(plan_json, target), capsys)
    assert code == 0, err
    first = target.read_bytes()
    assert len(first) > 100
    # The same command again gives the same bytes (and leaves only the file).
    code, _, err = run_cli(make_argv(plan_json, target), capsys)
    assert code == 0 and target.read_bytes() == first, err
    assert [p.name for p in folder.iterdir()] == [name]
    # Now the disk fills halfway through the write.
    accepted = _disk_full_in(folder, monkeypatch)
    code, stdout, err = run_cli(make_argv(plan_json, target), capsys)
    assert accepted and 0 < accepted[0] < len(first)  # a partial file did exist
    assert code == 2, stdout
    assert err.count("\n") == 1 and "No space left on device" in err, err
    assert "nothing was written" in err and str(target) in err
    assert target.read_bytes() == first
    assert [p.name for p in folder.iterdir()] == [name]
    # With no earlier file, nothing at all is left.
    target.unlink()
    accepted.clear()
    code, _, err = run_cli(make_argv(plan_json, target), capsys)
    assert code == 2 and "No space left on device" in err, err
    assert not any(folder.iterdir())


def test_rewrite_keeps_the_files_permissions(plan_json, tmp_path, capsys) -> None:
    out = tmp_path / "args.sh"
    out.write_text("old\n")
    out.chmod(0o750)
    code, _, err = run_cli(["export", str(plan_json), "--to", "megatron", "-o", str(out)],
                           capsys)
    assert code == 0, err
    assert out.read_text() != "old\n" and (out.stat().st_mode & 0o777) == 0o750
    fresh = tmp_path / "fresh.sh"
    umask = os.umask(0o022)
    try:
        code, _, err = run_cli(["export", str(plan_json), "--to", "megatron", "-o", str(fresh)],
                               capsys)
    finally:
        os.umask(umask)
    assert code == 0 and (fresh.stat().st_mode & 0o777) == 0o644, err


def test_run_log_is_checked_before_training(plan_json, tmp_path, monkeypatch, capsys) -> None:
    from planner.runtime.__main__ import main

    monkeypatch.setattr("planner.runtime.training.train", _boom)
    monkeypatch.delenv("RANK", raising=False)  # rank 0 writes the log
    log = tmp_path / "no" / "run.jsonl"
    assert main([str(plan_json), "--run-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --run-log ") and err.count("\n") == 1
    assert "does not exist" in err and not (tmp_path / "no").exists()


# Writers that are atomic by other means: the helper itself, launch's whole-folder swap, and
# the run log, which is appended to (rank 0 checks its folder before training).
OWN_WRITERS = {"planner/outfile.py", "planner/runtime/outdir.py", "planner/runtime/run_log.py"}
_WRITE = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*[\"'][wax]b?[\"']"
                    r"|savefig\((?!buf\b)")


def test_every_writer_goes_through_the_helper() -> None:
    """A file written any other way could be left half-written (or skip the path checks)."""
    root = Path(__file__).resolve().parents[1]
    offenders = [f"{path.relative_to(root)}:{i}"
                 for path in sorted((root / "planner").rglob("*.py"))
                 if path.relative_to(root).as_posix() not in OWN_WRITERS
                 for i, line in enumerate(path.read_text().splitlines(), 1)
                 if _WRITE.search(line)]
    assert not offenders, offenders


def test_calibration_write_is_all_or_nothing(tmp_path, monkeypatch) -> None:
    from planner.costing.calibrate import CalibrationFit, write_calibration
    from planner.errors import HetplanError

    fit = CalibrationFit({"A100-SXM4-80GB": 0.8}, (1.0,), (0.8,), (0.8,))
    out = tmp_path / "cal.yaml"
    write_calibration(out, fit, tmp_path / "runs.csv")
    first = out.read_bytes()
    _disk_full_in(tmp_path, monkeypatch)
    with pytest.raises(HetplanError, match="No space left on device"):
        write_calibration(out, CalibrationFit({"T4": 0.5}, (1.0,), (0.5,), (0.5,)),
                          tmp_path / "runs.csv")
    assert out.read_bytes() == first and [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]
