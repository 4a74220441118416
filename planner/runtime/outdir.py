"""Write a folder of generated files all or nothing.

The files go to a temporary folder beside the target, which is then renamed into place. A
target that already holds an earlier hetplan launch folder (it has the marker file) is
replaced whole, so no script of an older plan is left beside a new plan; any other non-empty
folder is refused rather than overwritten, and so is a target whose parent folder is missing
(as for every output file). On any failure the target is as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from planner.errors import HetplanError

__all__ = ["MARKER", "check_out_dir", "write_folder"]

MARKER = ".hetplan-launch"
"""Present in every folder hetplan writes: it may be replaced by a later launch."""


def _ours(d: Path) -> bool:
    if (d / MARKER).is_file():
        return True
    # Launch folders of earlier hetplan versions (before the marker).
    names = {p.name for p in d.iterdir()}
    return {"plan.json", "ranks.tsv"} <= names and all(
        n.endswith((".sh", ".json", ".tsv", ".sbatch")) for n in names)


def check_out_dir(d: Path) -> None:
    """Refuse, in one HetplanError line naming the path and the fix, a target that cannot
    become the folder: a file, a foreign non-empty folder, a parent folder that is missing, a
    file, or not writable. The target itself may be missing (it is created); its parent is
    never created, as every other output path of hetplan (`planner/outfile.py`): a mistyped
    path is an error, not a new tree. Called before the work, and again by `write_folder`."""
    if d.exists() and not d.is_dir():
        raise HetplanError(f"--out-dir {d}: is a file; give a folder path")
    if d.is_dir() and any(d.iterdir()) and not _ours(d):
        raise HetplanError(f"--out-dir {d}: exists and holds files hetplan did not write; "
                           "give a new or empty folder")
    parent = d.parent
    if not parent.exists():
        raise HetplanError(f"--out-dir {d}: folder {parent} does not exist; create it first "
                           f"(mkdir -p {parent}) or write elsewhere")
    if not parent.is_dir():
        raise HetplanError(f"--out-dir {d}: {parent} is a file, not a folder")
    try:  # permission bits alone do not tell (root, read-only mounts, ACLs)
        Path(tempfile.mkdtemp(prefix=f".{d.name}.probe-", dir=parent)).rmdir()
    except OSError as exc:
        raise HetplanError(f"--out-dir {d}: cannot write in folder {parent} "
                           f"({exc.strerror or exc}); nothing was written; pick a folder you "
                           "can write to") from None


def write_folder(target: Path, files: dict[str, tuple[str, bool]]) -> None:
    """`files`: name → (text, executable). One-line HetplanError on any OS failure."""
    check_out_dir(target)
    tmp: Path | None = None
    try:
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

