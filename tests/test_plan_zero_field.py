"""A plan states its ZeRO stage once (`zero`): an older file's `zero1` reads as the older
writers meant it (stage max(zero, zero1)), with a note saying to write `zero` instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate
from planner.costing.megatron import megatron_plan
from planner.errors import SpecError
from planner.graph import load_model
from planner.schema import Plan
from planner.search import plan as search_plan
from tests.cli import run_cli
from tests.test_runtime_plans import make_plan, stage

_TWO = [{"microbatches": 2, "stages": [stage(0, 4, [0])]},
        {"microbatches": 2, "stages": [stage(0, 4, [1])]}]


def _data(**zero_fields: object) -> dict:
    data = make_plan(_TWO).to_dict()
    data.pop("zero", None)
    return {**data, **zero_fields}


def test_a_searched_plan_writes_its_stage_in_zero_only() -> None:
    # Two pipelines: the search shards optimizer state (stage 1) and must say so in `zero`.
    result = search_plan(load_model("tiny"), load_cluster("amp-t4"), global_batch_size=8,
                         micro_batch_sizes=(1,))
    sharded = [p for p in result.candidates if len(p.pipelines) > 1]
    assert sharded
    for p in sharded:
        text = p.to_json()
        assert '"zero1"' not in text
        assert json.loads(text)["zero"] == p.zero_stage >= 1
        assert Plan.from_dict(json.loads(text)).to_json() == text


# What the older writers put in plan files: every multi-pipeline plan `"zero1": true, "zero": 0`
# (stage 1 via the old `zero_stage` = max(zero, int(zero1))), refine `"zero1": false, "zero": 2`.
@pytest.mark.parametrize(("fields", "stage_in_force"), [
    ({"zero1": True, "zero": 0}, 1), ({"zero1": False, "zero": 2}, 2),
    ({"zero1": True}, 1), ({"zero1": False}, 0), ({"zero1": True, "zero": 3}, 3),
    ({"zero1": False, "zero": 0}, 0), ({"zero": 2}, 2)])
def test_old_files_zero1_reads_as_the_old_zero_stage(fields: dict, stage_in_force: int) -> None:
    p = Plan.from_dict(_data(**fields))
    assert p.zero == p.zero_stage == max(fields.get("zero", 0), int(fields.get("zero1", 0)))
    assert p.zero == stage_in_force
    assert '"zero1"' not in p.to_json()


def _old_writer_file(tmp_path: Path) -> tuple[Path, Plan]:
    """A searched multi-pipeline plan, saved as the older writer did: `"zero1": true` and
    `"zero": 0` for its stage 1 (key order as that writer put them)."""
    result = search_plan(load_model("tiny"), load_cluster("amp-t4"), global_batch_size=8,
                         micro_batch_sizes=(1,))
    new = next(p for p in result.candidates if len(p.pipelines) > 1 and p.zero_stage == 1)
    old: dict = {}
    for key, value in new.to_dict().items():
        if key == "zero":
            old["zero1"] = True
            value = 0
        old[key] = value
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old, indent=2) + "\n")
    return path, new


def test_an_old_writers_plan_file_loads_with_its_stage(tmp_path: Path) -> None:
    path, new = _old_writer_file(tmp_path)
    notes: list[str] = []
    loaded = Plan.load(path, note=notes.append)
    assert loaded.to_json() == new.to_json()
    assert notes == [f'note: {path}: "zero1" is the older spelling; read as ZeRO stage 1 — '
                     'write "zero": 1 and delete "zero1"']


def test_the_cli_notes_the_old_spelling_on_stderr_not_in_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, new = _old_writer_file(tmp_path)
    code, out, err = run_cli(["estimate", str(path), "--json"], capsys)
    assert code == 0, err
    json.loads(out)  # stdout is the JSON alone
    assert err.count('"zero1" is the older spelling; read as ZeRO stage 1') == 1
    code, out, err = run_cli(["export", str(path), "--to", "megatron"], capsys)
    assert code == 0, err
    assert "--use-distributed-optimizer" in out and "older spelling" in err


def test_an_out_of_range_zero_beside_zero1_is_still_refused() -> None:
    for bad in (5, -1):
        with pytest.raises(SpecError, match="zero"):
            Plan.from_dict(_data(zero1=True, zero=bad))


def test_zero1_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(SpecError, match="zero1.*not true or false"):
        Plan.from_dict(_data(zero1="yes"))


def test_editing_zero_to_0_turns_sharding_off() -> None:
    # The edit a user makes to turn ZeRO off must price as the plan built with zero 0 (the
    # optimizer state whole on every replica), not as the stage 1 the other field said.
    model = load_model("tiny-llama")
    cluster = load_cluster("amp-t4")
    on = megatron_plan(model, cluster, tp=1, pp=1, dp=4, micro_batch=1, global_batch=8,
                       zero1=True, zero=1)
    off = megatron_plan(model, cluster, tp=1, pp=1, dp=4, micro_batch=1, global_batch=8)
    data = on.to_dict()
    data["zero"] = 0
    edited = Plan.from_dict(data)
    assert edited.zero_stage == 0
    def peak(p: Plan) -> float:
        return max(s.peak_memory_gib for s in estimate(model, cluster, p).stages)

    assert peak(edited) == peak(off) > peak(on)


@pytest.mark.parametrize("value", [True, "1", 1.5])
def test_a_zero_stage_that_is_not_a_whole_number_is_refused(value: object) -> None:
    # pydantic's lax mode would read true or "1" as stage 1.
    with pytest.raises(SpecError, match="zero: .* is not a whole number"):
        Plan.from_dict(_data(zero=value))
