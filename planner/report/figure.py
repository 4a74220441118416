"""Saving matplotlib figures without pyplot's global state, byte-identical run to run."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from planner.errors import HetplanError

__all__ = ["FORMATS", "check_picture_path", "save_figure"]

FORMATS = (".png", ".svg")


def check_picture_path(path: str | Path) -> Path:
    """`path` if a picture can be drawn there (.png or .svg); else one HetplanError line.
    Commands call it before their search, so a typo costs no wait."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise HetplanError(f"{p}: cannot draw a {suffix or 'suffix-less'} file; "
                           "name it .png or .svg")
    return p


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG or SVG (by suffix); no dates or random ids: equal input, equal bytes."""
    p = check_picture_path(path)
    suffix = p.suffix.lower()
    if suffix == ".svg":
        # SVG ids come from a hash salted per run unless fixed; dates come from metadata.
        import matplotlib

        with matplotlib.rc_context({"svg.hashsalt": "hetplan"}):
            _write(fig, p, metadata={"Date": None, "Creator": None})
    else:
        _write(fig, p, metadata={"Software": None}, dpi=120)
    return p


def _write(fig: Figure, path: Path, **kwargs: object) -> None:
    try:
        fig.savefig(path, bbox_inches="tight", **kwargs)
    except OSError as exc:
        raise HetplanError(f"{path}: cannot write the picture ({exc.strerror})") from None
