"""What `plan` and `estimate` show: one layer notation (interleaved chunks never overlap), the
memory of each stage by part, and alternatives as full plans that say when they differ only in
placement."""

from __future__ import annotations

import json
import re

import pytest

from planner.cluster import load_cluster
from planner.costing import megatron_plan
from planner.graph import load_model
from planner.report.alternatives import placement_note, placement_twins
from planner.schema import Plan
from tests.cli import run_cli

_RANGE = re.compile(r"L(\d+)(?:–(\d+))?")


def _ranges(cell: str) -> list[tuple[int, int]]:
    """`L0–1 | L3` -> [(0, 2), (3, 4)] (half-open)."""
    return [(int(a), int(b or a) + 1) for a, b in _RANGE.findall(cell)]


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    model, cluster = load_model("tiny"), load_cluster("amp-t4")
    plan = megatron_plan(model, cluster, tp=1, pp=2, dp=2, micro_batch=1, global_batch=8,
                         schedule="interleaved", virtual_stages=2)
    path = tmp_path_factory.mktemp("plans") / "interleaved.json"
    plan.save(path)
    return plan, path


def test_interleaved_chunks_shown_once_each(interleaved, capsys) -> None:
    plan, path = interleaved
    code, out, err = run_cli(["estimate", str(path), "--json"], capsys)
    assert code == 0, err
    stages = json.loads(out)["stages"]
    s_count = len(plan.device_groups(0))
    for row in stages:
        chunks = plan.pipelines[row["pipeline"]].stages[row["stage"]::s_count]
        assert row["chunks"] == [list(c.layers) for c in chunks]
    for argv in (["estimate", str(path)], ["simulate", str(path)]):
        code, out, err = run_cli(argv, capsys)
        assert code == 0, err
        assert "interleaved (2 virtual stages)" in " ".join(out.split())
        # Each table row's layer cell; per pipeline the cells tile the chain exactly once.
        cells = re.findall(r"T4\S*\s*[│ ]\s*(?:1\s*[│ ]\s*)?(L\d[^│]*?)\s*[│ ]\s{2,}", out)
        assert len(cells) == 4, out
        for pipe in (cells[:2], cells[2:]):
            covered = sorted(r for cell in pipe for r in _ranges(cell))
            assert covered == [(0, 2), (2, 3), (3, 4), (4, 6)], (pipe, out)
            assert " | " in pipe[0]


def test_plan_tables_use_the_same_notation(interleaved) -> None:
    """`plan`'s stage table and shape line (the search seldom picks interleaving for tiny, so
    they are drawn here from an interleaved plan and its estimate)."""
    from rich.console import Console

    from planner.cli.cmd_plan import _shape, _stage_table, _summary
    from planner.costing import estimate

    plan, _ = interleaved
    est = estimate(None, None, plan)
    console = Console(width=200, record=True)
    console.print(_stage_table(plan, est, "t"))
    table = console.export_text()
    assert "L0–1 | L3" in table and "L2 | L4–5" in table
    assert _shape(plan) == "2 pipelines: T4×1 L0–1 | L3 → T4×1 L2 | L4–5"
    assert "interleaved (2 virtual stages)" in _summary(plan, est)


def test_memory_parts_add_up_and_follow_zero(capsys) -> None:
    """Model state as hetplan's runtime holds it (fp32 parameters under bf16 autocast): fp32
    weights 4 B and gradients 4 B whole, Adam's moments 8 B at ZeRO-0 and the slice's fp32
    master besides (12 B) split over DP under ZeRO-1, plus the autocast region's bf16 copy of
    each GEMM weight (2 B); ZeRO-3 (FSDP2) shards 4 + 4 + 8 B and gathers bf16 layers."""
    model = load_model("llama3-8b")
    # Llama 3 8B's GEMM weights: q, o 4096², k, v 4096 × 1024, SwiGLU 3 × 4096 × 14,336 per
    # block, the head's 128,256 × 4,096; not the norms nor the embedding's looked-up table.
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    gemm_of = {"embedding": 0, "block": block, "head": 128_256 * 4096}
    for zero, dp in ((0, 1), (1, 4), (3, 4)):
        code, out, err = run_cli(["estimate", "llama3-8b", "dgx-a100", "--tp", "1", "--pp", "2",
                                  "--dp", str(dp), "--global-batch", "8", "--zero", str(zero),
                                  "--recompute", "full", "--json"], capsys)
        assert code in (0, 3), err
        for row in json.loads(out)["stages"]:
            mem = row["memory_gib"]
            assert sum(mem.values()) == pytest.approx(row["peak_memory_gib"], abs=1e-5)
            a, b = row["layers"]
            params = sum(layer.params for layer in model.graph.layers[a:b])
            gib = params / 2**30
            gemm = sum(gemm_of[layer.kind] for layer in model.graph.layers[a:b]) / 2**30
            if zero == 3:  # weights and gradients sharded too, plus the layers it gathers
                assert mem["optimizer"] == pytest.approx(8 * gib / dp, rel=1e-6)
                assert 4 * gib / dp < mem["weights"] < 4 * gib
                assert mem["gradients"] == pytest.approx(mem["weights"], rel=1e-9)
                continue
            assert mem["optimizer"] == pytest.approx((12 if zero else 8) * gib / dp, rel=1e-6)
            assert mem["weights"] == pytest.approx(4 * gib + 2 * gemm, rel=1e-6)
            assert mem["gradients"] == pytest.approx(4 * gib, rel=1e-6)
            assert mem["activations"] > 0 and mem["other"] >= 1.5
    code, out, _ = run_cli(["estimate", "llama3-8b", "dgx-a100", "--tp", "1", "--pp", "2",
                            "--dp", "4", "--global-batch", "8", "--zero", "1",
                            "--recompute", "full"], capsys)
    for col in ("weights", "grads", "optim", "activ", "other", "peak GiB"):
        assert col in out


def test_placement_twins_are_named() -> None:
    cluster = load_cluster("lab-mixed")
    plan = megatron_plan(load_model("tiny"), cluster, tp=1, pp=2, dp=1, micro_batch=1,
                         global_batch=4)
    d = plan.to_dict()
    assert {r["node"] for r in d["ranks"]} == {"a100-0"}
    d["ranks"] = [{**r, "node": "a100-1"} for r in d["ranks"]]  # the same work, another node
    twin = Plan.from_dict(d)
    other = megatron_plan(load_model("tiny"), cluster, tp=2, pp=1, dp=1, micro_batch=1,
                          global_batch=4)
    plans = [plan, other, twin]
    assert placement_twins(plans) == [None, None, 0]
    assert placement_note(plans, 2, 0) == ("placement only: same shape as #1, on other nodes "
                                          "(a100-1)")


def test_alternatives_are_full_plans(tmp_path, capsys) -> None:
    code, out, err = run_cli(["plan", "tiny", "lab-mixed", "--global-batch", "8", "--top-k", "4",
                              "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    alts = data["alternatives"]
    assert len(alts) == 3
    assert set(alts[0]["plan"]) == set(data["plan"])
    shapes = [data["plan"], *(a["plan"] for a in alts)]

    def bare(p: dict) -> str:  # the plan without where it runs
        q = {k: v for k, v in p.items() if k not in ("ranks", "predicted")}
        q["pipelines"] = [{**pi, "stages": [{k: v for k, v in st.items() if k != "ranks"}
                                            for st in pi["stages"]]} for pi in p["pipelines"]]
        return json.dumps(q, sort_keys=True)

    for k, alt in enumerate(alts, start=1):
        same = [j + 1 for j in range(k) if bare(shapes[j]) == bare(shapes[k])]
        assert alt["placement_of"] == (same[0] if same else None)
        assert alt["note"].startswith("placement only") == bool(same)
    # An alternative saved as it is: estimate reads it and prices it as the search did.
    path = tmp_path / "alt.json"
    path.write_text(json.dumps(alts[-1]["plan"]))
    code, out, err = run_cli(["estimate", str(path), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["tokens_per_s"] == pytest.approx(
        alts[-1]["plan"]["predicted"]["tokens_per_s"], rel=1e-6)


def test_pipelines_label() -> None:
    from planner.report.plan_view import pipelines_label

    assert pipelines_label([3]) == "p3"
    assert pipelines_label(list(range(8))) == "p0–7 ×8"
    assert pipelines_label([0, 2, 5]) == "p0,2,5 ×3"
    assert pipelines_label([0, 2, 4, 6, 8]) == "p0,2,4,6,… ×5"
