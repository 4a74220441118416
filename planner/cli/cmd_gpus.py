"""`hetplan gpus [NAME] [--json]`: what the GPU catalog holds, every number with its source."""

from __future__ import annotations

from typing import Any

import typer
from rich import box
from rich.table import Table

from cost_models.gpu import DTYPES, GpuSpec
from planner.cli.main import app
from planner.cli.output import console, print_json, wide_console
from planner.errors import HetplanError

__all__ = ["gpu_record", "gpus"]


def gpu_record(spec: GpuSpec) -> dict[str, Any]:
    """One catalog entry as plain JSON data (fixed key order)."""
    return {
        "name": spec.name,
        "vendor": spec.vendor,
        "generation": spec.generation,
        "memory_gib": spec.memory_gib,
        "hbm_gb_per_s": spec.hbm_gb_per_s,
        "peak_tflops": {d: spec.peak_tflops[d] for d in DTYPES if d in spec.peak_tflops},
        "intra_node_link": spec.intra_node_link,
        "intra_node_gb_per_s": spec.intra_node_gb_per_s,
        "nvlink_gb_per_s": spec.nvlink_gb_per_s,
        "pcie_gb_per_s": spec.pcie_gb_per_s,
        "tdp_w": spec.tdp_w,
        "sm_count": spec.sm_count,
        "price_per_gpu_hour": spec.price_per_gpu_hour,
        "aliases": list(spec.aliases),
        "notes": spec.notes,
        "sources": dict(spec.sources),
    }


_TABLE_WIDTH = 112


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}"


def _table(specs: tuple[GpuSpec, ...]) -> Table:
    table = Table(
        title="GPU catalog: dense peak TFLOP/s; links per GPU, one direction, GB/s",
        caption="GeForce tensor rates: FP32 accumulate (half the headline). "
        "Sources: `hetplan gpus NAME` or --json.",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("GiB", justify="right")
    table.add_column("mem GB/s", justify="right")
    for dtype in DTYPES:
        table.add_column(dtype, justify="right")
    table.add_column("link", no_wrap=True)
    table.add_column("W", justify="right")
    table.add_column("$/h", justify="right")
    for s in specs:
        table.add_row(
            s.name,
            _num(s.memory_gib),
            _num(s.hbm_gb_per_s),
            *(_num(s.peak_tflops.get(d)) for d in DTYPES),
            f"{s.intra_node_link} {_num(s.intra_node_gb_per_s)}",
            _num(s.tdp_w),
            _num(s.price_per_gpu_hour),
        )
    return table


def _detail(spec: GpuSpec) -> Table:
    table = Table(title=f"{spec.name} ({spec.vendor} {spec.generation})", show_lines=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_column("source")
    rows: list[tuple[str, float | None]] = [
        ("memory_gib", spec.memory_gib),
        ("hbm_gb_per_s", spec.hbm_gb_per_s),
        *((f"peak_tflops.{d}", spec.peak_tflops[d]) for d in DTYPES if d in spec.peak_tflops),
        ("intra_node_gb_per_s", spec.intra_node_gb_per_s),
        ("nvlink_gb_per_s", spec.nvlink_gb_per_s),
        ("pcie_gb_per_s", spec.pcie_gb_per_s),
        ("tdp_w", spec.tdp_w),
        ("sm_count", spec.sm_count),
        ("price_per_gpu_hour", spec.price_per_gpu_hour),
    ]
    for field, value in rows:
        if value is None:
            continue
        source = spec.sources.get(field) or spec.sources.get(field.split(".")[0], "")
        table.add_row(field, _num(value), source)
    caption = f"aliases: {', '.join(spec.aliases) or '-'}"
    if spec.notes:
        caption += f"\n{spec.notes}"
    table.caption = caption
    return table


@app.command()
def gpus(
    name: str = typer.Argument(None, help="One GPU (any alias), with the source of each number."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the GPU catalog: memory, bandwidth, dense peaks per dtype, links, prices, sources."""
    # Here, not at the top: every command imports this module at start-up (yaml, catalog).
    from cost_models.catalog import all_gpus, get_gpu

    if name is not None:
        try:
            specs: tuple[GpuSpec, ...] = (get_gpu(name),)
        except LookupError as exc:
            raise HetplanError(str(exc)) from None
    else:
        specs = all_gpus()
    if json_out:
        print_json([gpu_record(s) for s in specs])
    elif name is not None:
        console.print(_detail(specs[0]))
    else:
        # The table needs ~110 columns; a narrower console would cut the numbers to "1…".
        wide_console(_TABLE_WIDTH).print(_table(specs))
