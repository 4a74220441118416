"""`hetplan --version`, shell completion, the progress spinner and `validate`'s data folder."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

import planner
from planner.costing.validation import DATA_FILES, default_data_dir
from tests.cli import run_cli


def test_version(capsys) -> None:
    code, out, err = run_cli(["--version"], capsys)
    assert code == 0 and out == f"hetplan {planner.__version__}\n" and err == ""
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'version = {attr = "planner.__version__"}' in pyproject


def test_completion_script_and_completions(capsys, monkeypatch) -> None:
    code, out, _ = run_cli(["--show-completion", "bash"], capsys)
    assert code == 0
    assert "complete -o default -F _hetplan_completion hetplan" in out
    assert "_HETPLAN_COMPLETE=complete_bash" in out
    # What bash asks the script for, and what it gets back: commands, then a command's options.
    monkeypatch.setenv("_HETPLAN_COMPLETE", "complete_bash")
    for words, cword, expected in (("hetplan pl", "1", ["plan"]),
                                   ("hetplan val", "1", ["validate"]),
                                   ("hetplan plan tiny lab-mixed --glo", "4", ["--global-batch"])):
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", cword)
        code, out, _ = run_cli([], capsys)
        assert code == 0 and out.split() == expected, (words, out)


@pytest.fixture
def small_data(tmp_path: Path) -> Path:
    """A data folder with the first three rows of the shipped AMP file (a fast report)."""
    lines = (default_data_dir() / "amp_measured_plans.csv").read_text().splitlines(True)
    (tmp_path / "amp_measured_plans.csv").write_text("".join(lines[:4]))
    return tmp_path


def _tty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the captured stderr claim to be a terminal, as an interactive shell's is."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")


def test_spinner_only_on_a_terminal_and_never_with_json(capsys, monkeypatch) -> None:
    from planner.cli.progress import spinner

    for tty, enabled, shown in ((False, True, False), (True, False, False), (True, True, True)):
        if tty:
            _tty(monkeypatch)
        with spinner("working", enabled=enabled) as step:
            step("half way")
        out = capsys.readouterr()
        assert out.out == ""
        assert ("working" in out.err) == shown, (tty, enabled, out.err)


def test_validate_on_a_terminal(small_data, capsys, monkeypatch) -> None:
    _tty(monkeypatch)
    code, out, err = run_cli(["validate", "--data-dir", str(small_data), "--json"], capsys)
    assert code == 0 and err == ""  # JSON only, nothing else on either stream
    data = json.loads(out)
    homogeneous = [r for r in data["analytic"] if r["group"] == "homogeneous"]
    assert [(r["file"], r["rows_counted"]) for r in homogeneous] == [
        ("amp_measured_plans.csv", 2)]
    # The measured column of the file's rows (the second ran out of memory: not counted).
    assert [x["measured"] for x in homogeneous[0]["rows"]] == [1.32, None, 1.28]
    code, out, err = run_cli(["validate", "--data-dir", str(small_data)], capsys)
    assert code == 0
    assert "validating the cost model" in err and "validating" not in out
    assert "amp_measured_plans.csv" in out


def test_validate_reads_a_nemo_table_alone(tmp_path, capsys) -> None:
    """A folder holding only nemo_b200.csv: its rows priced on the catalog's B200 with the
    megatron record (context-parallel rows at their cp), the unknown-shape rows listed with
    their reason; a copy missing a column is one line of error, not a traceback."""
    folder = tmp_path / "data"
    folder.mkdir()
    text = (default_data_dir() / "nemo_b200.csv").read_text()
    (folder / "nemo_b200.csv").write_text(text)
    code, out, err = run_cli(["validate", "--data-dir", str(folder), "--json"], capsys)
    assert code == 0 and err == ""
    reps = {(r["file"], r["group"]): r for r in json.loads(out)["analytic"]}
    assert set(reps) == {("nemo_b200.csv", "all"), ("per framework", "megatron")}
    rows = reps[("nemo_b200.csv", "all")]["rows"]
    assert len(rows) == 10 and reps[("nemo_b200.csv", "all")]["rows_counted"] == 8
    assert {x["note"] for x in rows if not x["used"]} == {"model shape not known"}
    header, *lines = text.splitlines()
    cut = ",".join(c for c in header.split(",") if c != "mbs")
    (folder / "nemo_b200.csv").write_text("\n".join([cut, *lines]) + "\n")
    code, out, err = run_cli(["validate", "--data-dir", str(folder), "--json"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")


@pytest.mark.parametrize("kind", ["missing", "empty", "unrelated"])
def test_validate_without_data_is_one_line(kind, tmp_path, capsys) -> None:
    folder = tmp_path / "data"
    if kind != "missing":
        folder.mkdir()
    if kind == "unrelated":
        (folder / "notes.csv").write_text("a,b\n1,2\n")
    code, out, err = run_cli(["validate", "--data-dir", str(folder), "--json"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")
    assert str(folder) in err and ("no such folder" if kind == "missing" else
                                   "holds none of the measurement files") in err


def test_shipped_measurements_are_the_public_files() -> None:
    """The shipped copies match the project's collection where it is present (a clean clone
    has only the copies), and every file the report reads is shipped. Files transcribed from
    their sources directly (a `source` column per row, e.g. nemo_b200.csv) are not in the
    collection; each row of theirs names its source."""
    shipped = default_data_dir()
    assert {p.name for p in shipped.glob("*.csv")} == set(DATA_FILES)
    readme = (shipped / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in DATA_FILES)
    public = Path(__file__).resolve().parents[2] / "shared" / "data"
    if public.is_dir():
        for name in DATA_FILES:
            if (public / name).is_file():
                assert (shipped / name).read_bytes() == (public / name).read_bytes(), name
    for name in DATA_FILES:
        with (shipped / name).open(newline="") as fh:
            header = next(csv.reader(fh))
            rows = list(csv.DictReader(fh, fieldnames=header))
        if "source" in header:
            assert rows and all(r["source"].strip() for r in rows), name
