"""`hetplan whatif --plot / --save-cluster`: the picture; an edited cluster all commands read."""

from __future__ import annotations

import json

import pytest

from planner.cluster import load_cluster
from planner.report.compare import CompareRow
from planner.report.whatif import WhatIf
from planner.report.whatif_plot import whatif_figure
from planner.schema import Plan
from tests.cli import run_cli


def _row(name: str, tps: float | None, usd_m: float | None, feasible: bool = True) -> CompareRow:
    return CompareRow(cluster=name, feasible=feasible, tokens_per_s=tps,
                      usd_per_million_tokens=usd_m, usd_per_hour=None if usd_m is None else 1.0)


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_figure_bars_values_and_gaps() -> None:
    w = WhatIf(edits=(), before=_row("a", 1000.0, 2.0), after=_row("a'", 2500.0, 1.5),
               cluster_after={})
    fig = whatif_figure(w, "m on a")
    tps, usd = fig.axes
    assert [round(p.get_height()) for p in tps.patches] == [1000, 2500]
    assert [p.get_height() for p in usd.patches] == [2.0, 1.5]
    assert tps.get_title() == "tokens/s: +150.0%"   # (2500 - 1000) / 1000
    assert usd.get_title() == "$/1M tokens: -25.0%"  # (1.5 - 2) / 2
    assert "2,500" in _texts(fig) and "$1.5" in _texts(fig)
    # No feasible plan after: a labelled gap, never a bar of height 0.
    gone = WhatIf(edits=(), before=_row("a", 1000.0, None),
                  after=_row("a'", None, None, feasible=False), cluster_after={})
    fig = whatif_figure(gone)
    assert [len(ax.patches) for ax in fig.axes] == [1, 0]
    assert _texts(fig).count("no plan") == 2 and "no price" in _texts(fig)


def test_plot_and_saved_cluster_round_trip(tmp_path, capsys) -> None:
    png, saved = tmp_path / "w.png", tmp_path / "edited.yaml"
    code, out, err = run_cli(["whatif", "tiny", "amp-t4", "--add", "4 A100", "--remove", "g4dn",
                              "--add", "2x4 T4", "--global-batch", "8", "--json", "--plot",
                              str(png), "--save-cluster", str(saved)], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The saved file loads to exactly the edited cluster ...
    assert load_cluster(saved).spec == data["cluster_after"]
    # ... and plan / estimate read it: the plan on it is the what-if's "after" plan.
    plan_file = tmp_path / "plan.json"
    code, out, err = run_cli(["plan", "tiny", str(saved), "--global-batch", "8", "--top-k", "1",
                              "-o", str(plan_file), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["plan"]["predicted"]["tokens_per_s"] == pytest.approx(
        data["after"]["tokens_per_s"], rel=1e-9)
    code, out, err = run_cli(["estimate", str(plan_file), str(saved), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["tokens_per_s"] == pytest.approx(data["after"]["tokens_per_s"],
                                                           rel=1e-9)
    assert Plan.load(plan_file).cluster == data["cluster_after"]


def test_unwritable_outputs_are_one_line(tmp_path, capsys) -> None:
    for flag, name in (("--save-cluster", "x.yaml"), ("--plot", "x.jpg")):
        target = tmp_path / "missing-dir" / name if flag == "--save-cluster" else tmp_path / name
        code, _, err = run_cli(["whatif", "tiny", "amp-t4", "--price", "t4=0.5",
                                "--global-batch", "8", flag, str(target)], capsys)
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1, err
