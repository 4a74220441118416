"""Command-line options several commands share."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from planner.errors import HetplanError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from cost_models.profiles import ProfileSet

__all__ = ["CalibrationOption", "FrameworkOption", "ProfilesOption", "SeqLenOption",
           "note_calibration_gpus",
           "finite_option", "load_profiles", "parse_seq_len", "use_calibration"]



def finite_option(value: float | None) -> float | None:
    """Callback of a float option: refuse nan and inf (typer's min/max let nan through)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number; give one")
    return value


CalibrationOption = Annotated[Path | None, typer.Option(
    "--calibration", help="Constants refitted on this cluster's measured runs (from "
    "`hetplan calibrate RUNS.csv --out FILE`).")]


_CALIBRATION: list[tuple[Path, dict[str, float]]] = []
"""The `--calibration` file this command applied, for `note_calibration_gpus` (one entry)."""


def use_calibration(path: Path | None) -> None:
    """Apply `--calibration FILE` to every estimate of this command (checked first); without
    one, the shipped constants (an earlier in-process command's file must not stay in force)."""
    from planner.costing.calibrate import apply_calibration, load_calibration

    _CALIBRATION.clear()
    if path is None:
        apply_calibration({})
        return
    scales = load_calibration(path)
    apply_calibration(scales)
    _CALIBRATION.append((path, scales))


def note_calibration_gpus(gpus: Iterable[str], where: str = "this cluster") -> None:
    """Say on stderr which GPU types of the `--calibration` file the cluster(s) lack: their
    scales change nothing here. A note, not an error: one file may serve several clusters."""
    if not _CALIBRATION:
        return
    from planner.costing.calibrate import unused_scales

    path, scales = _CALIBRATION[0]
    present = set(gpus)
    unused = unused_scales(scales, present)
    if unused:
        typer.echo(f"note: --calibration {path}: {', '.join(unused)} not in {where} "
                   f"(GPUs: {', '.join(sorted(present))}); "
                   f"{'that scale has' if len(unused) == 1 else 'those scales have'} no effect",
                   err=True)

FrameworkOption = Annotated[str | None, typer.Option(
    "--framework", help="Runtime to price: hetplan (what `hetplan launch` runs) | megatron | "
    "torchtitan | deepspeed (`hetplan frameworks` lists what each assumes). "
    "Default: the one a plan file was priced for, else hetplan.")]
"""`--framework NAME`; commands resolve it with `planner.costing.framework.framework_named`."""

ProfilesOption = Annotated[list[Path] | None, typer.Option(
    "--profiles", help="Profile CSV of measured layer times (e.g. from `hetplan profile`); "
    "repeatable. Its rows replace the shipped ones for the same GPU, model and layer.")]


def load_profiles(paths: list[Path] | None, *, shipped: bool = True) -> ProfileSet | None:
    """The ProfileSet for `--profiles` files (None: the shipped profiles, the default of
    every API call); one-line HetplanError for a missing or malformed file."""
    from cost_models.profiles import ProfileSet, with_profile_files

    if not paths:
        return None if shipped else ProfileSet()
    import csv

    from planner.input_files import MAX_JSON_BYTES, clip, read_text

    for p in paths:
        read_text(p, f"--profiles {p}", what="profile CSV", max_bytes=MAX_JSON_BYTES)
    try:
        return with_profile_files(paths, shipped=shipped)
    except (ValueError, KeyError, OSError, csv.Error) as exc:
        raise HetplanError(f"--profiles: {clip(str(exc), 300)}") from None


SeqLenOption = Annotated[str | None, typer.Option(
    "--seq-len", metavar="N", help="Training sequence length in tokens (default: the model "
    "file's; a HuggingFace config.json: min(max_position_embeddings, 4096), with a notice).")]
"""Read as text so that `--seq-len 4k` or `4096.5` is one `error:` line (`parse_seq_len`)."""


def parse_seq_len(text: str | None) -> int | None:
    """`--seq-len` as a positive integer (None: not given); one HetplanError line if not."""
    if text is None:
        return None
    digits = text.strip()
    # At most 9 digits before int(): Python refuses to convert over 4,300 (a traceback).
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 9 or int(digits) < 1:
        raise HetplanError(f"--seq-len {text[:20]!r}: expected a positive whole number of tokens, "
                           "e.g. --seq-len 4096")
    return int(digits)
