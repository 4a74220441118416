"""What-if edit: split whole GPUs into MIG slices (`--partition "A100-SXM4-80GB:1g.10gb"`).

Every group of the parent GPU type becomes a group of slices: each GPU gives the profile's
instance count (7 for 1g.10gb), the intra-node link becomes PCIe (MIG instances have no
NVLink or P2P: cost_models/mig.py), and a price the group states per GPU-hour is shared out
by compute share, as the catalog does for slices.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from cost_models.catalog import get_gpu
from cost_models.mig import mig_profiles, split_mig_name
from planner.errors import HetplanError

__all__ = ["partition_cluster"]


def partition_cluster(spec: dict[str, Any],
                      partitions: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """A copy of `spec` with the named GPU types split into slices, and one note per group."""
    new = copy.deepcopy(spec)
    notes: list[str] = []
    for text in partitions:
        parts = split_mig_name(text)
        if parts is None:
            raise HetplanError(f"--partition {text!r}: write GPU:PROFILE, e.g. "
                               "--partition \"A100-SXM4-80GB:1g.10gb\"")
        try:
            parent = get_gpu(parts[0])
            slice_gpu = get_gpu(text)
        except LookupError as exc:
            raise HetplanError(f"--partition {text!r}: {exc}") from None
        profile = next(p for p in mig_profiles(parent) if p.name == parts[1])
        hit = [g for g in new["nodes"] if get_gpu(g["gpu"]).name == parent.name]
        if not hit:
            names = ", ".join(g["name"] for g in new["nodes"])
            raise HetplanError(f"--partition {text!r}: the cluster has no {parent.name} group "
                               f"(groups: {names})")
        for g in hit:
            per_node = g["gpus_per_node"] * profile.max_instances
            notes.append(f"partitioned {g['name']}: {g['count']}×{g['gpus_per_node']} "
                         f"{parent.name} → {g['count']}×{per_node} {slice_gpu.name}")
            g["gpu"] = slice_gpu.name
            g["gpus_per_node"] = per_node
            g["intra_node"] = "pcie"
            g.pop("intra_node_gb_per_s", None)
            g.pop("intra_node_gbps", None)
            if g.get("price_per_gpu_hour") is not None:
                g["price_per_gpu_hour"] *= profile.compute_sevenths / 7.0
    return new, notes
