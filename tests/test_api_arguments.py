"""The Python API checks its arguments at the entry points: one line naming the argument and
the fix, as a ValueError / TypeError (and a HetplanError, which the CLI prints), never a NaN
or an AttributeError from inside the cost model."""

from __future__ import annotations

import math

import pytest

import planner
from planner.costing.framework import MEGATRON_CORE
from planner.costing.megatron import megatron_plan
from planner.errors import HetplanError


@pytest.fixture(scope="module")
def moe() -> tuple:
    model, cluster = planner.load_model("tiny-moe"), planner.load_cluster("amp-t4")
    plan = megatron_plan(model, cluster, tp=1, pp=1, dp=2, micro_batch=1, global_batch=4)
    return model, cluster, plan


def _bound(model) -> float:
    # num_experts / top-k, read from the model spec itself (the closed-form ceiling).
    spec = model.spec
    return spec.num_experts / spec.num_experts_per_tok


@pytest.mark.parametrize("factor", [math.nan, math.inf, 1e308, 0.5, 0.0, -1.0])
def test_estimate_refuses_a_capacity_factor_out_of_range(moe, factor: float) -> None:
    model, cluster, plan = moe
    with pytest.raises(ValueError) as err:
        planner.estimate(model, cluster, plan, capacity_factor=factor)
    assert isinstance(err.value, HetplanError)
    msg = str(err.value)
    assert "capacity_factor" in msg and "\n" not in msg


def test_estimate_accepts_the_capacity_factor_bound_and_refuses_above(moe) -> None:
    model, cluster, plan = moe
    bound = _bound(model)
    est = planner.estimate(model, cluster, plan, capacity_factor=bound)
    assert math.isfinite(est.iteration_time_s)
    with pytest.raises(ValueError, match=f"at most {bound:g}"):
        planner.estimate(model, cluster, plan, capacity_factor=bound * 1.01)


def test_estimate_refuses_a_capacity_factor_that_is_not_a_number(moe) -> None:
    model, cluster, plan = moe
    with pytest.raises(TypeError, match="capacity_factor.*expected a number"):
        planner.estimate(model, cluster, plan, capacity_factor="1.5")


def test_estimate_takes_a_framework_name_as_the_cli_does(moe) -> None:
    model, cluster, plan = moe
    by_name = planner.estimate(model, cluster, plan, framework="megatron")
    by_record = planner.estimate(model, cluster, plan, framework=MEGATRON_CORE)
    assert by_name == by_record
    with pytest.raises(ValueError, match="framework='megatronn': use one of hetplan"):
        planner.estimate(model, cluster, plan, framework="megatronn")
    with pytest.raises(TypeError, match="framework: expected a framework name"):
        planner.estimate(model, cluster, plan, framework=3)


def test_estimate_refuses_a_plan_that_is_not_a_plan(moe) -> None:
    model, cluster, plan = moe
    with pytest.raises(TypeError, match="plan: expected a planner.Plan"):
        planner.estimate(model, cluster, plan.to_dict())


@pytest.mark.parametrize(("kwargs", "kind", "text"), [
    ({"global_batch_size": "8"}, TypeError, "global_batch_size='8': expected a whole number"),
    ({"global_batch_size": 8.0}, TypeError, "global_batch_size=8.0: expected a whole number"),
    ({"global_batch_size": True}, TypeError, "global_batch_size=True"),
    ({"top_k": 0}, ValueError, "top_k=0: must be >= 1"),
    ({"micro_batch_sizes": ("2",)}, TypeError, "micro_batch_sizes item='2'"),
    ({"framework": "nemo"}, ValueError, "framework='nemo': use one of"),
    ({"micro_batch_sizes": 2}, TypeError, "micro_batch_sizes=2: expected a list"),
    ({"budget_usd_per_hour": "5"}, TypeError, "budget_usd_per_hour='5': expected a number"),
    ({"budget_usd_per_hour": math.nan}, ValueError, "budget_usd_per_hour nan: must be a"),
    ({"schedules": "1f1b"}, TypeError, "schedules='1f1b': expected a list of schedule names"),
    ({"sequence_parallel": "yes"}, TypeError, "sequence_parallel='yes': expected True or"),
    ({"profiles": "x"}, TypeError, "profiles: expected a cost_models.profiles.ProfileSet"),
])
def test_plan_refuses_bad_arguments_in_one_line(kwargs: dict, kind: type, text: str) -> None:
    model, cluster = planner.load_model("tiny"), planner.load_cluster("amp-t4")
    with pytest.raises(kind) as err:
        planner.plan(model, cluster, **kwargs)
    assert text in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, HetplanError)


def test_estimate_refuses_profiles_that_are_not_a_profile_set(moe) -> None:
    model, cluster, plan = moe
    with pytest.raises(TypeError, match="profiles: expected a cost_models.profiles.ProfileSet"):
        planner.estimate(model, cluster, plan, profiles="x")


def test_sharding_estimator_checks_its_arguments_as_estimate_does(moe) -> None:
    from planner.costing.estimate import sharding_estimator

    model, cluster, plan = moe
    judge = sharding_estimator(model, cluster, plan, framework="megatron")
    assert judge(plan) == planner.estimate(model, cluster, plan, framework=MEGATRON_CORE)
    with pytest.raises(ValueError, match="framework='megatronn'"):
        sharding_estimator(model, cluster, plan, framework="megatronn")
    with pytest.raises(ValueError, match=f"at most {_bound(model):g}"):
        sharding_estimator(model, cluster, plan, capacity_factor=_bound(model) * 1.01)
    with pytest.raises(TypeError, match="profiles: expected"):
        sharding_estimator(model, cluster, plan, profiles="x")


def test_argument_errors_are_exported_from_planner() -> None:
    from planner.errors import ArgumentError, ArgumentTypeError

    assert planner.ArgumentError is ArgumentError and issubclass(ArgumentError, ValueError)
    assert planner.ArgumentTypeError is ArgumentTypeError
    assert {"ArgumentError", "ArgumentTypeError"} <= set(planner.__all__)
