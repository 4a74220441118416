"""Child process of tests/test_json_determinism.py: run every `--json` command once, in order,
in the current folder (relative paths only), and write what each printed and every file the
commands wrote to the JSON file named by argv[1].

One process runs them all (torch is imported once); the test starts two, in different folders
under different PYTHONHASHSEEDs, so a wall time, a date, an absolute path or an order taken
from a set or a hash shows up as a difference between the two.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from planner.cli.main import main

# (name, argv). `plan` writes p.json, which the later commands read; the small clusters and
# the tiny model keep the whole list to seconds. `models` (20 s: it extracts the whole zoo)
# and `profile` (it reports measured times) are left out.
COMMANDS: tuple[tuple[str, list[str]], ...] = (
    ("gpus", ["gpus", "--json"]),
    ("frameworks", ["frameworks", "--json"]),
    ("inspect", ["inspect", "tiny", "--json"]),
    ("plan", ["plan", "tiny", "amp-het", "--global-batch", "16", "-o", "p.json", "--json"]),
    ("estimate plan", ["estimate", "p.json", "--json"]),
    ("estimate flags", ["estimate", "tiny", "dgx-a100", "--tp", "1", "--pp", "2", "--dp", "2",
                        "--micro-batch", "1", "--global-batch", "8", "--json"]),
    ("simulate", ["simulate", "p.json", "--json", "--svg", "g.svg"]),
    ("compare", ["compare", "tiny", "amp-het", "dgx-a100", "--global-batch", "16", "--json"]),
    ("whatif", ["whatif", "tiny", "amp-het", "--add", "4 A100", "--global-batch", "16",
                "--json", "--save-cluster", "w.yaml"]),
    ("replan", ["replan", "p.json", "--remove", "p3-0", "-o", "r.json", "--json"]),
    ("export", ["export", "p.json", "--to", "megatron"]),
    ("launch", ["launch", "p.json", "--out-dir", "launch", "--json"]),
    ("calibrate", ["calibrate", "runs.csv", "--out", "cal.yaml", "--json"]),
    ("validate", ["validate", "--data-dir", "data", "--json"]),
    ("dryrun", ["dryrun", "p.json", "--json", "--steps", "1", "--max-ranks", "4"]),
)


def run(argv: list[str]) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    old, sys.argv = sys.argv, ["hetplan", *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def main_child(result_file: str) -> None:
    results = {name: run(argv) for name, argv in COMMANDS}
    files = {str(p): p.read_text(errors="replace") for p in sorted(Path(".").rglob("*"))
             if p.is_file()}
    Path(result_file).write_text(json.dumps({"commands": results, "files": files}))


if __name__ == "__main__":
    main_child(sys.argv[1])
