"""MIG (Multi-Instance GPU) slices as devices: `A100-SXM4-80GB:1g.10gb` is one GPU instance.

Profiles from the NVIDIA Multi-Instance GPU User Guide (docs.nvidia.com/datacenter/tesla/
mig-user-guide, "Supported MIG Profiles" tables for A100-SXM4-40GB, A100-80GB, H100-80GB and
H200-141GB): a profile `Ng.Mgb` owns N of the GPU's 7 compute slices (SMs) and k of its 8
memory slices (memory and its bandwidth: each memory slice holds 1/8 of the memory
controllers); the table's "fraction of memory" column gives k. The guide also states that
MIG instances have no GPU-to-GPU P2P (neither NVLink nor PCIe P2P), so slices talk through
host memory over the GPU's one PCIe link.

Derived numbers (our modelling choices, stated here): peak FLOP/s and board power × N/7;
memory and HBM bandwidth × k/8; the intra-node link is PCIe at the parent's one-direction PCIe
bandwidth divided by the profile's instance count (all slices of a GPU share its link); price
per GPU-hour × N/7 (a cloud that sells slices prices them by compute share).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from cost_models.gpu import GpuSpec

__all__ = ["MIG_PROFILES", "MigProfile", "mig_gpu", "mig_profiles", "split_mig_name"]

_GUIDE = ("NVIDIA Multi-Instance GPU User Guide, 'Supported MIG Profiles' "
          "(docs.nvidia.com/datacenter/tesla/mig-user-guide)")


class MigProfile(NamedTuple):
    name: str
    compute_sevenths: int
    """Compute slices (of 7) the instance owns."""
    memory_eighths: int
    """Memory slices (of 8): memory and its bandwidth."""
    max_instances: int
    """Most instances of this profile one GPU holds."""


_A100_40 = (MigProfile("1g.5gb", 1, 1, 7), MigProfile("1g.10gb", 1, 2, 4),
            MigProfile("2g.10gb", 2, 2, 3), MigProfile("3g.20gb", 3, 4, 2),
            MigProfile("4g.20gb", 4, 4, 1), MigProfile("7g.40gb", 7, 8, 1))
_80GB = (MigProfile("1g.10gb", 1, 1, 7), MigProfile("1g.20gb", 1, 2, 4),
         MigProfile("2g.20gb", 2, 2, 3), MigProfile("3g.40gb", 3, 4, 2),
         MigProfile("4g.40gb", 4, 4, 1), MigProfile("7g.80gb", 7, 8, 1))
_H200 = (MigProfile("1g.18gb", 1, 1, 7), MigProfile("1g.35gb", 1, 2, 4),
         MigProfile("2g.35gb", 2, 2, 3), MigProfile("3g.71gb", 3, 4, 2),
         MigProfile("4g.71gb", 4, 4, 1), MigProfile("7g.141gb", 7, 8, 1))

MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "A100-SXM4-40GB": _A100_40, "A100-PCIE-40GB": _A100_40,
    "A100-SXM4-80GB": _80GB, "A100-PCIE-80GB": _80GB,
    "H100-SXM5-80GB": _80GB, "H100-PCIE-80GB": _80GB,
    "H200-SXM-141GB": _H200,
}
"""Catalog name -> its MIG profiles (the guide's tables; A100 PCIe parts share the SXM ones)."""


def split_mig_name(name: str) -> tuple[str, str] | None:
    """`PARENT:PROFILE` -> (parent, profile); None when `name` names no slice."""
    parent, sep, profile = name.partition(":")
    return (parent.strip(), profile.strip().lower()) if sep else None


def mig_profiles(parent: GpuSpec) -> tuple[MigProfile, ...]:
    return MIG_PROFILES.get(parent.name, ())


_CACHE: dict[tuple[str, str], GpuSpec] = {}


def _derived(parent: GpuSpec, profile: str) -> GpuSpec:
    found = {p.name: p for p in mig_profiles(parent)}
    if profile not in found:
        known = ", ".join(found) or "none: the part has no MIG"
        raise LookupError(f"{parent.name} has no MIG profile {profile!r} (profiles: {known})")
    p = found[profile]
    c, m = p.compute_sevenths / 7.0, p.memory_eighths / 8.0
    link = parent.pcie_gb_per_s / p.max_instances
    why = f"{_GUIDE}: {profile} = {p.compute_sevenths}/7 compute, {p.memory_eighths}/8 memory"
    return replace(
        parent, name=f"{parent.name}:{profile}", memory_gib=parent.memory_gib * m,
        hbm_gb_per_s=parent.hbm_gb_per_s * m,
        peak_tflops={k: v * c for k, v in parent.peak_tflops.items()},
        intra_node_link="pcie", intra_node_gb_per_s=link, nvlink_gb_per_s=None,
        tdp_w=parent.tdp_w * c, aliases=(),
        sm_count=None if parent.sm_count is None else max(1, round(parent.sm_count * c)),
        price_per_gpu_hour=(None if parent.price_per_gpu_hour is None
                            else parent.price_per_gpu_hour * c),
        notes=f"MIG slice {profile} of {parent.name}; no NVLink/P2P between slices",
        sources={**parent.sources, "memory_gib": why, "hbm_gb_per_s": why, "peak_tflops": why,
                 "tdp_w": why, "sm_count": why,
                 "intra_node_gb_per_s": f"{_GUIDE}: no P2P between instances; "
                 f"parent PCIe shared by {p.max_instances} slices"})


def mig_gpu(parent: GpuSpec, profile: str) -> GpuSpec:
    """The slice `profile` of `parent` as a device; LookupError naming the valid profiles."""
    key = (parent.name, profile.strip().lower())
    if key not in _CACHE:
        _CACHE[key] = _derived(parent, key[1])
    return _CACHE[key]
