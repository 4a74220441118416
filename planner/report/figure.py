"""Saving matplotlib figures without pyplot's global state, byte-identical run to run."""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.figure import Figure

from planner.errors import HetplanError
from planner.outfile import check_output, write_output

__all__ = ["FORMATS", "check_figure_path", "save_figure"]

FORMATS = (".png", ".svg")


def check_figure_path(path: str | Path, flag: str | None = None) -> Path:
    """Refuse, before any work, a picture path hetplan cannot draw to or write (one line)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        where = f"{flag} {p}" if flag else str(p)
        raise HetplanError(f"{where}: cannot draw a {suffix or 'suffix-less'} file; "
                           "name it .png or .svg")
    check_output(p, flag)
    return p


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG or SVG (by suffix), all or nothing; no dates or random ids: equal
    input, equal bytes."""
    p = check_figure_path(path)
    buf = io.BytesIO()
    if p.suffix.lower() == ".svg":
        # SVG ids come from a hash salted per run unless fixed; dates come from metadata.
        import matplotlib

        with matplotlib.rc_context({"svg.hashsalt": "hetplan"}):
            fig.savefig(buf, format="svg", bbox_inches="tight",
                        metadata={"Date": None, "Creator": None})
    else:
        fig.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None},
                    dpi=120)
    return write_output(p, buf.getvalue())
