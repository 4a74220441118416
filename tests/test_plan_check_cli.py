"""One plan validator for every command that reads a plan (estimate, simulate, dryrun, launch):
each broken plan is one `error:` line naming the field, exit 2, and nothing is written;
a plan that does not fit its GPUs exits 3 with the numbers, and dryrun/launch refuse it."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cost_models.catalog import get_gpu
from planner.cluster import load_cluster
from planner.graph.load_spec import load_model_spec
from tests.cli import run_cli as _run

A100, T4 = "A100-SXM4-80GB", "T4"


def _base() -> dict[str, Any]:
    """tiny (4 heads, 6 chain layers) on lab-mixed: A100 TP 2 → T4, one pipeline."""
    return {
        "schema": "hetplan.plan/v1",
        "model": load_model_spec("tiny").model_dump(mode="json"),
        "cluster": load_cluster("lab-mixed").spec,
        "global_batch_size": 4, "micro_batch_size": 1, "schedule": "1f1b",
        "pipelines": [{"microbatches": 4, "stages": [
            {"layers": [0, 3], "gpu": A100, "tp": 2, "ranks": [0, 1]},
            {"layers": [3, 6], "gpu": T4, "tp": 1, "ranks": [2]}]}],
        "ranks": [{"rank": 0, "node": "a100-0", "local_rank": 0},
                  {"rank": 1, "node": "a100-0", "local_rank": 1},
                  {"rank": 2, "node": "t4-0", "local_rank": 0}],
    }


def _tp(tp: int) -> Callable[[dict], None]:
    """Stage 0 at TP `tp` on a100-0, the T4 stage renumbered after it."""
    def edit(d: dict) -> None:
        d["pipelines"][0]["stages"][0].update(tp=tp, ranks=list(range(tp)))
        d["pipelines"][0]["stages"][1]["ranks"] = [tp]
        d["ranks"] = ([{"rank": r, "node": "a100-0", "local_rank": r} for r in range(tp)]
                      + [{"rank": tp, "node": "t4-0", "local_rank": 0}])
    return edit


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        *head, last = path.split(".")
        cur: Any = d
        for key in head:
            cur = cur[int(key)] if isinstance(cur, list) else cur[key]
        cur[int(last) if isinstance(cur, list) else last] = value
    return edit


# (case, edit, words the one error line must contain)
BROKEN = [
    ("tp3-on-4-heads", _tp(3), ["pipelines.0.stages.0.tp", "TP 3", "layers.0", "1, 2, 4"]),
    ("tp8-on-4-heads", _tp(8), ["pipelines.0.stages.0.tp", "TP 8"]),
    ("node-missing", _set("ranks.2.node", "t4-9"), ["ranks.2.node", "'t4-9'", "lab-mixed"]),
    ("16-ranks-on-8-gpus", _tp(16), ["node a100-0 has 16 ranks but 8 GPUs"]),
    ("local-rank-past-gpus", _set("ranks.2.local_rank", 4), ["ranks.2.local_rank", "4 GPUs"]),
    ("too-many-layers", lambda d: (_set("pipelines.0.stages.1.layers", [3, 9])(d)),
     ["pipelines", "[0, 9)", "has 6"]),
    ("t4-label-on-a100", _set("pipelines.0.stages.0.gpu", "T4"),
     ["pipelines.0.stages.0.gpu", "a100-0", A100]),
    ("unknown-gpu", _set("pipelines.0.stages.1.gpu", "Z100"),
     ["pipelines.0.stages.1.gpu", "unknown GPU type 'Z100'"]),
    ("hidden-size-0", _set("model.hidden_size", 0), ["hidden-size-0.json: model: hidden_size"]),
    ("gpu-used-twice", _set("ranks.1.local_rank", 0),
     ["ranks 0 and 1 share one GPU (node a100-0, local_rank 0)"]),
    ("sp-seq-not-divisible", lambda d: (_tp(4)(d), d["model"].update(seq_len=30),
                                        d.update(sequence_parallel=True)),
     ["pipelines.0.stages.0.tp", "sequence length 30"]),
    ("tp-as-text", _set("pipelines.0.stages.0.tp", "2"),
     ["pipelines.0.stages.0.tp: '2' is not a whole number"]),
    ("framework-unknown", _set("predicted", {"framework": "nonesuch"}),
     ["predicted.framework", "'nonesuch'"]),
    ("hidden-2-to-the-40", _set("model.hidden_size", 2**40), ["hidden_size"]),
    ("cluster-without-nodes", _set("cluster.nodes", []), ["nodes.json: cluster: nodes"]),
]


def _commands(path: Path, out: Path) -> list[list[str]]:
    return [["estimate", str(path)], ["simulate", str(path)], ["dryrun", str(path)],
            ["launch", str(path), "--out-dir", str(out)]]


def test_the_valid_base_plan_passes_every_command_but_dryrun(tmp_path: Path, capsys) -> None:
    # The base is sound: the validator, not some other rule, refuses each edit below.
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_base()))
    for argv in _commands(path, tmp_path / "launch"):
        if argv[0] == "dryrun":
            continue  # runs workers: covered in test_runtime_cli
        code, _, err = _run(argv, capsys)
        assert code == 0, (argv, err)


@pytest.mark.parametrize(("case", "edit", "words"), BROKEN, ids=[c[0] for c in BROKEN])
def test_every_command_refuses_a_broken_plan_in_one_line(case, edit, words, tmp_path: Path,
                                                          capsys) -> None:
    data = copy.deepcopy(_base())
    edit(data)
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "launch"
    for argv in _commands(path, out):
        code, stdout, err = _run(argv, capsys)
        assert code == 2, (argv, err)
        assert err.startswith("error: ") and err.count("\n") == 1, err
        for word in words:
            assert word in err, (argv, word, err)
        assert not out.exists()


def test_estimate_and_launch_check_the_plan_against_the_cluster_given(tmp_path: Path,
                                                                    capsys) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_base()))
    out = tmp_path / "l"
    # dgx-a100 has no t4-0 node: the plan cannot run there.
    code, _, err = _run(["launch", str(path), "--cluster", "dgx-a100", "--out-dir", str(out)],
                        capsys)
    assert code == 2 and "ranks.0.node" in err and "dgx-a100" in err and not out.exists()
    code, _, err = _run(["estimate", str(path), "dgx-a100"], capsys)
    assert code == 2 and "ranks.0.node" in err and "dgx-a100" in err
    code, text, err = _run(["estimate", str(path), "lab-mixed", "--json"], capsys)
    assert code == 0 and json.loads(text)["feasible"] is True, err
    # The cluster the plan was made for: the scripts' plan.json embeds it.
    code, _, err = _run(["launch", str(path), "--cluster", "lab-mixed", "--out-dir", str(out)],
                        capsys)
    assert code == 0, err
    assert json.loads((out / "plan.json").read_text())["cluster"]["name"] == "lab-mixed"


def test_gpu_alias_is_accepted() -> None:
    from planner.costing.plan_check import check_plan
    from planner.schema import Plan

    data = _base()
    data["pipelines"][0]["stages"][0]["gpu"] = "a100-80g"
    assert get_gpu("a100-80g").name == A100
    checked = check_plan(Plan.from_dict(data))
    assert checked.rank_node[2].name == "t4-0"


def _oom_plan() -> dict[str, Any]:
    """llama3-8b whole on one T4: weights alone (8.0e9 params × 2 B ≈ 15 GiB) plus Adam state
    (16 B/param ≈ 120 GiB) cannot fit 16 GiB."""
    d = _base()
    d["model"] = load_model_spec("llama3-8b").model_dump(mode="json")
    d["pipelines"] = [{"microbatches": 4, "stages": [
        {"layers": [0, 34], "gpu": T4, "tp": 1, "ranks": [0]}]}]
    d["ranks"] = [{"rank": 0, "node": "t4-0", "local_rank": 0}]
    return d


def test_an_infeasible_plan_exits_3_with_numbers_and_is_not_run(tmp_path: Path,
                                                                 capsys) -> None:
    path = tmp_path / "oom.json"
    path.write_text(json.dumps(_oom_plan()))
    code, out, _ = _run(["estimate", str(path), "--json"], capsys)
    assert code == 3
    est = json.loads(out)
    assert est["feasible"] is False
    need = est["stages"][0]["peak_memory_gib"]
    assert need > 16 * 8  # Adam alone: 16 B/param × 8.0e9 params = 119 GiB
    code, out, _ = _run(["estimate", str(path)], capsys)
    assert code == 3 and f"needs {need:.1f} GiB" in out
    code, out, _ = _run(["simulate", str(path), "--json"], capsys)
    assert code == 3 and json.loads(out)["feasible"] is False
    out_dir = tmp_path / "launch"
    for argv in (["dryrun", str(path)], ["launch", str(path), "--out-dir", str(out_dir)]):
        code, _, err = _run(argv, capsys)
        assert code == 3, err
        assert err.count("\n") == 1 and f"needs {need:.1f} GiB per GPU" in err
        assert "T4 has 16.0 GiB" in err and argv[0] in err
    assert not out_dir.exists()
    # With flags, too.
    code, _, _ = _run(["estimate", "llama3-8b", "lab-mixed", "--tp", "1", "--pp", "1",
                       "--dp", "1", "--global-batch", "8"], capsys)
    assert code == 3


def test_plan_exits_3_when_nothing_fits(tmp_path: Path, capsys) -> None:
    # Model state alone, 405.85e9 parameters × 16 B over 16 T4s, is 378.0 GiB each; a T4 has 16.
    out = tmp_path / "none.json"
    code, _, err = _run(["plan", "llama3-405b", "amp-t4", "-o", str(out)], capsys)
    assert code == 3 and err.count("\n") == 1 and "no plan fits" in err, err
    need = float(re.search(r"reaches is ([0-9.]+) GiB", err).group(1))
    assert need >= 405.85e9 * 16 / 16 / 2**30 and not out.exists()
