"""Checks of the Python API's arguments at its entry points (`planner.plan`, `estimate`).

The CLI's options are typed and bounded by typer; a Python caller can pass anything, so the
public functions check here and fail in one line naming the argument and the fix, instead of
a TypeError, an AttributeError or a NaN from deep inside the cost model. The CLI shares the
checks that need the model (`check_capacity_factor`).
"""

from __future__ import annotations

import math
from typing import Any

from planner.errors import ArgumentError, ArgumentTypeError

__all__ = ["check_budget", "check_capacity_factor", "check_count", "check_flag",
           "check_profiles", "check_schedules", "check_sizes", "framework_arg"]


def check_count(name: str, value: Any, *, low: int = 1) -> int:
    """`value` as a whole number >= `low`; ArgumentTypeError for text, booleans, fractions."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name}={value!r:.40}: expected a whole number (e.g. 8, not "
                                f"\"8\"), got {type(value).__name__}")
    if value < low:
        raise ArgumentError(f"{name}={value}: must be >= {low}")
    return value


def framework_arg(framework: Any, name: str = "framework") -> Any:
    """A Framework record, or the record a name (as the CLI's --framework takes) stands for."""
    from planner.costing.framework import FRAMEWORKS, Framework

    if isinstance(framework, Framework):
        return framework
    if isinstance(framework, str):
        if framework not in FRAMEWORKS:
            raise ArgumentError(f"{name}={framework!r}: use one of {', '.join(FRAMEWORKS)} "
                                "(or a planner.costing.framework.Framework)")
        return FRAMEWORKS[framework]
    kind = type(framework).__name__
    raise ArgumentTypeError(f"{name}: expected a framework name ({', '.join(FRAMEWORKS)}) or "
                            f"a planner.costing.framework.Framework, got {kind}")


def check_capacity_factor(value: Any, graph: Any = None, name: str = "capacity_factor") -> float:
    """A finite number >= 1 (the busiest expert carries at least the mean load) and, given the
    model's graph, at most num_experts / top-k of its MoE layers: the busiest expert takes
    every token at most once (beyond it the expert GEMMs would be priced on tokens that do
    not exist, up to an infinite, NaN iteration)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentTypeError(f"{name}={value!r:.40}: expected a number such as 1.25, got "
                                f"{type(value).__name__}")
    if not math.isfinite(value) or value < 1.0:
        raise ArgumentError(f"{name} {value:g}: must be a finite number >= 1 (the busiest "
                            "expert carries at least the mean load)")
    if graph is not None:
        bound = min((layer.num_experts / layer.experts_per_token for layer in graph.layers
                     if layer.num_experts and layer.experts_per_token), default=None)
        if bound is not None and value > bound:
            raise ArgumentError(f"{name} {value:g}: at most {bound:g} (num_experts / top-k: "
                                "the busiest expert receives every token at most once)")
    return float(value)


def check_sizes(name: str, value: Any) -> tuple[int, ...] | None:
    """A list or tuple of whole numbers >= 1 (e.g. micro_batch_sizes=[1, 2]), or None."""
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise ArgumentTypeError(f"{name}={value!r:.40}: expected a list of whole numbers "
                                f"(e.g. [{value!r:.20}]), got {type(value).__name__}")
    return tuple(check_count(f"{name} item", v) for v in value)


def check_budget(value: Any, name: str = "budget_usd_per_hour") -> float | None:
    """None (no budget) or a finite number of dollars per hour >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentTypeError(f"{name}={value!r:.40}: expected a number of dollars per hour "
                                f"such as 25.0, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ArgumentError(f"{name} {value:g}: must be a finite number >= 0")
    return float(value)


def check_schedules(value: Any, name: str = "schedules") -> tuple[str, ...] | None:
    """None (every schedule) or a list or tuple of schedule names; a bare string would be
    read letter by letter."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(s, str) for s in value):
        raise ArgumentTypeError(f"{name}={value!r:.40}: expected a list of schedule names "
                                "(e.g. [\"1f1b\"]), got "
                                f"{type(value).__name__}")
    return tuple(value)


def check_flag(name: str, value: Any) -> bool:
    """True or False (not "yes", 1 or None)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name}={value!r:.40}: expected True or False, got "
                                f"{type(value).__name__}")
    return value


def check_profiles(value: Any, name: str = "profiles") -> Any:
    """None or a cost_models.profiles.ProfileSet (e.g. from planner.cli's --profiles files)."""
    from cost_models.profiles import ProfileSet

    if value is not None and not isinstance(value, ProfileSet):
        raise ArgumentTypeError(f"{name}: expected a cost_models.profiles.ProfileSet or None, "
                                f"got {type(value).__name__}")
    return value
