"""A plan states its ZeRO stage once (`zero`): an older file's `zero1` is an alias, and a file
where the two disagree is refused, so editing one field never leaves the other in force."""

from __future__ import annotations

import json

import pytest

from planner.cluster import load_cluster
from planner.costing import estimate
from planner.costing.megatron import megatron_plan
from planner.errors import SpecError
from planner.graph import load_model
from planner.schema import Plan
from planner.search import plan as search_plan
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


@pytest.mark.parametrize(("fields", "stage_in_force"), [
    ({"zero1": True}, 1), ({"zero1": False}, 0), ({"zero1": True, "zero": 3}, 3),
    ({"zero1": False, "zero": 0}, 0), ({"zero": 2}, 2)])
def test_old_files_zero1_reads_as_an_alias(fields: dict, stage_in_force: int) -> None:
    p = Plan.from_dict(_data(**fields))
    assert p.zero == p.zero_stage == stage_in_force
    assert '"zero1"' not in p.to_json()


@pytest.mark.parametrize("fields", [{"zero1": True, "zero": 0}, {"zero1": False, "zero": 2}])
def test_a_file_whose_zero_fields_disagree_is_refused(fields: dict) -> None:
    with pytest.raises(SpecError) as err:
        Plan.from_dict(_data(**fields), where="p.json")
    msg = str(err.value)
    assert "\n" not in msg and "p.json" in msg
    assert '"zero1"' in msg and '"zero"' in msg and "disagree" in msg and "delete" in msg


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
