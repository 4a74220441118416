"""Command-line options several commands share."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["FrameworkOption"]

FrameworkOption = Annotated[str | None, typer.Option(
    "--framework", help="Runtime to price: hetplan (what `hetplan launch` runs) | megatron. "
    "Default: the one a plan file was priced for, else hetplan.")]
"""`--framework NAME`; commands resolve it with `planner.costing.framework.framework_named`."""
