"""hetplan's Python API: the same objects the CLI uses.

    import planner
    model = planner.load_model("llama3-70b"       # or a YAML / config.json path)
    cluster = planner.load_cluster("lab-mixed"     # planner/configs/clusters/, or a path)
    result = planner.plan(model, cluster, global_batch_size=1024)
    est = planner.estimate(model, cluster, result.best)

Imports are lazy so that `hetplan gpus` does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
"""The package version (pyproject.toml reads it from here)."""

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "HetplanError",
    "Plan",
    "estimate",
    "from_module",
    "load_cluster",
    "load_model",
    "plan",
    "replan",
]

_WHERE = {
    "ArgumentError": "planner.errors",
    "ArgumentTypeError": "planner.errors",
    "HetplanError": "planner.errors",
    "Plan": "planner.schema",
    "estimate": "planner.costing",
    "from_module": "planner.graph",
    "load_cluster": "planner.cluster",
    "load_model": "planner.graph",
    "plan": "planner.search",
    "replan": "planner.replanning",  # not planner/replan.py: a module would shadow the function
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
