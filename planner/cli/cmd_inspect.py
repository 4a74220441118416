"""`hetplan inspect MODEL [--json]`: the measured LayerGraph, per layer and in total."""

from __future__ import annotations

from typing import Any

import typer
from rich import box
from rich.table import Table

from planner.cli.main import app
from planner.cli.options import SeqLenOption, parse_seq_len
from planner.cli.output import console, print_json

__all__ = ["human_bytes", "human_count", "inspect", "inspect_record"]


def human_count(value: float, unit: str = "") -> str:
    """1.23e9 → '1.23 G' (decimal prefixes, 3 significant digits)."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def human_bytes(value: float) -> str:
    """Binary prefixes: 1536 → '1.5 KiB'."""
    for factor, prefix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.0f} B"


def inspect_record(model: Any) -> dict[str, Any]:
    """The `--json` document: LayerGraph.to_dict() plus precision and the spec."""
    record = model.graph.to_dict()
    record["precision"] = model.precision
    if any(layer.num_experts for layer in model.graph.layers):
        record["active_params"] = model.graph.active_params
    record["spec"] = model.spec.to_dict() if model.spec is not None else None
    return record


def _row_key(layer: Any) -> tuple[Any, ...]:
    d = layer.to_dict()
    return tuple(v for k, v in d.items() if k not in ("index", "name"))


def _runs(layers: Any) -> list[tuple[Any, Any, int]]:
    """Consecutive identical layers collapsed: (first, last, count)."""
    runs: list[tuple[Any, Any, int]] = []
    for layer in layers:
        if runs and _row_key(runs[-1][0]) == _row_key(layer):
            first, _, count = runs[-1]
            runs[-1] = (first, layer, count + 1)
        else:
            runs.append((layer, layer, 1))
    return runs


def _table(model: Any, every_layer: bool) -> Table:
    graph = model.graph
    tied = any(layer.tied_params for layer in graph.layers)
    table = Table(
        title=f"{graph.name}: per sequence of {graph.seq_len} tokens, {model.precision}",
        caption="FLOPs: attention counted non-causal (Korthikanti eq. 7). "
        "activation: saved for backward, no recompute. ×n: per layer."
        + (" tied: parameters counted in another layer; a stage holding this one without it "
           "keeps a copy." if tied else ""),
        box=box.SIMPLE_HEAD,
    )
    for column in ("layer", "params", "fwd FLOPs", "bwd FLOPs", "activation", "output"):
        table.add_column(column, justify="left" if column == "layer" else "right",
                         no_wrap=True)
    rows = [(layer, layer, 1) for layer in graph.layers] if every_layer else _runs(graph.layers)
    for first, last, count in rows:
        tail = last.name.rsplit(".", 1)[-1]
        label = first.name if count == 1 else f"{first.name}..{tail} (×{count})"
        params = human_count(first.params)
        if first.tied_params:
            params += f" (+{human_count(first.tied_params)} tied)"
        table.add_row(label, params, human_count(first.fwd_flops),
                      human_count(first.bwd_flops), human_bytes(first.activation_bytes),
                      human_bytes(first.output_bytes))
    activations = sum(layer.activation_bytes for layer in graph.layers)
    table.add_section()
    table.add_row("total", human_count(graph.params), human_count(graph.fwd_flops),
                  human_count(graph.bwd_flops), human_bytes(activations), "", style="bold")
    return table


@app.command()
def inspect(
    model: str = typer.Argument(..., help="Bundled name (see `hetplan models`), model YAML, "
                                "or HuggingFace config.json."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    every_layer: bool = typer.Option(False, "--all", help="One row per layer (no collapsing)."),
    seq_len: SeqLenOption = None,
) -> None:
    """Show the model's layer chain: params, FLOPs and bytes per layer, and totals."""
    from planner.graph import load_model

    loaded = load_model(model, seq_len=parse_seq_len(seq_len))
    if json_out:
        print_json(inspect_record(loaded))
        return
    console.print(_table(loaded, every_layer))
    graph = loaded.graph
    moe = [layer for layer in graph.layers if layer.num_experts]
    if moe:
        console.print(f"mixture of experts: {len(moe)} blocks × {moe[0].num_experts} experts, "
                      f"top-{moe[0].experts_per_token}; {human_count(graph.params)} parameters, "
                      f"{human_count(graph.active_params)} active per token. FLOPs and "
                      "activations assume balanced routing (each expert gets T·k/E tokens).")
