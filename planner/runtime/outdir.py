"""Write a folder of generated files all or nothing.

The files go to a temporary folder beside the target, which is then renamed into place. A
target that already holds an earlier hetplan launch folder (it has the marker file) is
replaced whole, so no script of an older plan is left beside a new plan; any other non-empty
folder is refused rather than overwritten. On any failure the target is as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from planner.errors import HetplanError

__all__ = ["MARKER", "write_folder"]

MARKER = ".hetplan-launch"
"""Present in every folder hetplan writes: it may be replaced by a later launch."""


def _ours(d: Path) -> bool:
    if (d / MARKER).is_file():
        return True
    # Launch folders of earlier hetplan versions (before the marker).
    names = {p.name for p in d.iterdir()}
    return {"plan.json", "ranks.tsv"} <= names and all(
        n.endswith((".sh", ".json", ".tsv", ".sbatch")) for n in names)


def _check_target(d: Path) -> None:
    if d.exists() and not d.is_dir():
        raise HetplanError(f"--out-dir {d}: is a file; give a folder path")
    if d.is_dir() and any(d.iterdir()) and not _ours(d):
        raise HetplanError(f"--out-dir {d}: exists and holds files hetplan did not write; "
                           "give a new or empty folder")
    parent = d.parent
    if parent.exists() and not parent.is_dir():
        raise HetplanError(f"--out-dir {d}: {parent} is a file, not a folder")


def write_folder(target: Path, files: dict[str, tuple[str, bool]]) -> None:
    """`files`: name → (text, executable). One-line HetplanError on any OS failure."""
    _check_target(target)
    created: list[Path] = []
    tmp: Path | None = None
    try:
        missing = []
        p = target.parent
        while not p.exists():
            missing.append(p)
            p = p.parent
        target.parent.mkdir(parents=True, exist_ok=True)
        created = list(reversed(missing))
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        for name, (text, executable) in files.items():
            path = tmp / name
            path.write_text(text)
            if executable:
                path.chmod(0o755)
        (tmp / MARKER).write_text("written by `hetplan launch`; the folder is replaced whole "
                                  "by the next launch into it\n")
        tmp.chmod(0o755)
        _swap(tmp, target)
        tmp = None
    except OSError as exc:
        raise HetplanError(f"--out-dir {target}: cannot write ({exc.strerror or exc}); "
                           "nothing was written") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            for d in reversed(created):
                with contextlib.suppress(OSError):
                    d.rmdir()


def _swap(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.rename(tmp, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    old.rmdir()
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)

