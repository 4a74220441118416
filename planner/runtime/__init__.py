"""The PyTorch runtime: runs a plan on every rank (torchrun), checks it locally (dryrun).

The only package in planner/ that imports torch.distributed. Imports are lazy so that
`hetplan launch` (pure text) does not pay for importing torch.

    from planner.runtime import train
    stats = train(plan, steps=10)            # on every rank, under torchrun

Modules: topology (plan → per-rank view), schedule (action lists), comm (groups, p2p),
stage (model protocol, TP, recompute), grads (DP / tied sync), engine (Runner), training,
build (spec → this rank's layers), check/local (gloo workers vs reference), dry_run, launch,
checkpoint (DCP save/load by global name), data_file (token files), lr_schedule.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DryrunResult",
    "Runner",
    "TrainStats",
    "dryrun",
    "node_scripts",
    "train",
    "write_scripts",
]

_WHERE = {
    "DryrunResult": "planner.runtime.dry_run",
    "Runner": "planner.runtime.engine",
    "TrainStats": "planner.runtime.training",
    "dryrun": "planner.runtime.dry_run",
    "node_scripts": "planner.runtime.launch",
    "train": "planner.runtime.training",
    "write_scripts": "planner.runtime.launch",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'planner.runtime' has no attribute {name!r}")
