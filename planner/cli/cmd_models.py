"""`hetplan models [--json]`: the bundled model zoo (planner/configs/models/)."""

from __future__ import annotations

from typing import Any

import typer
from rich import box
from rich.table import Table

from planner.cli.cmd_inspect import human_count
from planner.cli.main import app
from planner.cli.output import console, print_json

__all__ = ["models"]


def _records() -> list[dict[str, Any]]:
    from planner.graph import load_model, zoo_names

    records = []
    for name in zoo_names():
        model = load_model(name)
        records.append({**model.spec.to_dict(), "params": model.graph.params})
    return records


@app.command()
def models(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the bundled models with their shapes, parameter counts and sources."""
    records = _records()
    if json_out:
        print_json(records)
        return
    table = Table(title="Model zoo (planner/configs/models/)", box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="L layers, h hidden, a/kv heads, V vocab, s sequence. "
                  "Sources: --json or the YAML.")
    for column in ("name", "arch", "L", "h", "a/kv", "ffn", "V", "s", "params"):
        table.add_column(column, justify="left" if column in ("name", "arch") else "right",
                         no_wrap=True)
    for r in records:
        table.add_row(r["name"], r["architecture"], str(r["num_layers"]), str(r["hidden_size"]),
                      f"{r['num_attention_heads']}/{r['num_kv_heads']}",
                      str(r["ffn_hidden_size"]), str(r["vocab_size"]), str(r["seq_len"]),
                      human_count(r["params"]))
    console.print(table)
