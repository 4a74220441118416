"""Write an output file all or nothing, and check its path before the work that fills it.

Every file a command writes (a plan, a config, a calibration, a profile, a picture) goes
through `write_output`: the bytes go to a temporary file in the target's folder, which is
renamed over the target only once complete, so a failure (disk full, a kill) leaves the
previous file, or none, never half of one. `check_output` refuses a path that cannot take a
file (a folder, a missing folder, a read-only one) with one line, and commands call it before
a long search or run so that the work is not thrown away at the end.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from planner.errors import HetplanError

__all__ = ["check_output", "write_output"]

_CHUNK = 1 << 16


def _label(path: Path, flag: str | None) -> str:
    return f"{flag} {path}" if flag else str(path)


def _target(path: str | Path) -> Path:
    p = Path(path)
    # Writing through a link replaces the file it points to, not the link.
    return p.resolve() if p.is_symlink() else p


def check_output(path: str | Path, flag: str | None = None) -> Path:
    """The path a command will write to, or a one-line HetplanError naming `flag`, the path
    and the fix. The folder is probed by creating (and removing) a file in it: permission
    bits alone do not tell (root, read-only mounts, ACLs)."""
    p = _target(path)
    label = _label(Path(path), flag)
    if p.is_dir():
        raise HetplanError(f"{label}: is a folder; give a file path (a name inside it, "
                           "or elsewhere)")
    parent = p.parent
    if not parent.exists():
        raise HetplanError(f"{label}: folder {parent} does not exist; create it first "
                           f"(mkdir -p {parent}) or write elsewhere")
    if not parent.is_dir():
        raise HetplanError(f"{label}: {parent} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise HetplanError(f"{label}: cannot write in folder {parent} "
                           f"({exc.strerror or exc}); pick a folder you can write to") from None
    return p


def _mode(target: Path) -> int:
    """Keep an existing file's permissions; a new file gets what open() would give it."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view[:_CHUNK])
        view = view[n:]


def write_output(path: str | Path, data: str | bytes, flag: str | None = None) -> Path:
    """Write `data` (text as UTF-8) to `path` atomically; returns the path written.

    On any OS failure the target is as it was and no temporary file is left; the error is
    one HetplanError line."""
    p = check_output(path, flag)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    done = False
    try:
        try:
            _write_all(fd, payload)
            os.fchmod(fd, _mode(p))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
        done = True
    except OSError as exc:
        raise HetplanError(f"{_label(Path(path), flag)}: cannot write "
                           f"({exc.strerror or exc}); nothing was written") from None
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return p
