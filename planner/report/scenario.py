"""What-if edits on a cluster spec: add GPUs, remove node groups, change prices.

    spec, notes = edit_cluster(cluster.spec, add=["8 H100-SXM5-80GB"], remove=["v100"],
                               price=["a100=1.2"])

Edits apply in the order remove, add, price (so a price can target a group just added), to a
copy of the spec; the result is validated by `planner.cluster.cluster_from_dict`.

`--add "K TYPE"` adds K GPUs of TYPE; `--add "NxG TYPE"` adds N nodes of G GPUs. With K GPUs
the node shape is copied from a group of the same type already in the cluster (GPUs per node,
links, network, price), else G = 8 per node (4 for GH200, Alps' quad-GH200 nodes), the
catalog's intra-node link, and the node network of the type's usual server (NETWORK_GBPS).
K ≤ G gives one node of K GPUs; a larger K must be a multiple of G.
`--remove NAME` drops the group called NAME, or every group of GPU type NAME.
`--price KEY=USD` sets the price per GPU-hour of group KEY, or of every group of GPU type KEY.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from cost_models.catalog import get_gpu
from cost_models.gpu import GpuSpec
from planner.errors import HetplanError

__all__ = ["DEFAULT_GPUS_PER_NODE", "NETWORK_GBPS", "PCIE_NETWORK_GBPS", "edit_cluster"]

DEFAULT_GPUS_PER_NODE = 8
"""HGX / DGX baseboards and most cloud GPU instances hold 8 GPUs."""
_GPUS_PER_NODE = {"GH200-96GB": 4}  # CSCS Alps: HPE Cray EX254n blades, 4 GH200 per node.

NETWORK_GBPS = {
    "volta": 800.0,      # NVIDIA DGX-2 datasheet: 8× 100 Gb/s EDR InfiniBand.
    "ampere": 1600.0,    # NVIDIA DGX A100 datasheet: 8× 200 Gb/s HDR InfiniBand (ConnectX-6).
    "hopper": 3200.0,    # NVIDIA DGX H100 datasheet: 8× 400 Gb/s NDR InfiniBand (ConnectX-7).
    "blackwell": 3200.0,  # NVIDIA DGX B200 datasheet: 8× 400 Gb/s (ConnectX-7).
    "cdna2": 800.0,      # OLCF Frontier node: 4× 200 Gb/s Slingshot-11 (8 MI250X GCDs).
    "cdna3": 3200.0,     # AMD Instinct MI300X platform servers: 8× 400 Gb/s NICs.
}
"""Node network (Gbit/s, all NICs) of the usual server for NVLink-class GPUs, by generation."""
PCIE_NETWORK_GBPS = 100.0
"""PCIe-card nodes: AWS g4dn.metal (8× T4) and g5.48xlarge (8× A10G) both list 100 Gbit/s."""
_GH200_NETWORK_GBPS = 800.0  # CSCS Alps GH200 node: 4× 200 Gb/s Slingshot-11.

_ADD = re.compile(r"^\s*(?:(\d+)\s*[xX×]\s*)?(\d+)\s+(\S.*?)\s*$")


def edit_cluster(spec: dict[str, Any], *, add: Sequence[str] = (), remove: Sequence[str] = (),
                 price: Sequence[str] = (),
                 network_gbps: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """A new cluster spec with the edits applied, and one line per edit saying what it did.

    `network_gbps` overrides the node network of added groups. Raises HetplanError (one line)
    for a malformed edit or one that names nothing in the cluster.
    """
    new = copy.deepcopy(spec)
    groups: list[dict[str, Any]] = new["nodes"]
    notes: list[str] = []
    for text in remove:
        hit = _matching(groups, text, "--remove")
        groups[:] = [g for g in groups if g not in hit]
        notes.append(f"removed {', '.join(_shape(g) for g in hit)}")
    if not groups and remove and not add:
        raise HetplanError("--remove: the edits leave no GPUs in the cluster; add some with "
                           "--add \"8 A100-SXM4-80GB\"")
    for text in add:
        group = _new_group(groups, text, network_gbps)
        groups.append(group)
        notes.append(f"added {_shape(group)}")
    for text in price:
        key, sep, value = text.partition("=")
        usd = _number(value) if sep else None
        if not key.strip() or usd is None or usd < 0:
            raise HetplanError(f"--price {text!r}: write KEY=USD per GPU-hour, KEY a group name "
                               "or GPU type, e.g. --price a100=1.2")
        for g in _matching(groups, key.strip(), "--price"):
            g["price_per_gpu_hour"] = usd
            notes.append(f"price of {g['name']} ({g['gpu']}) set to ${usd:g}/GPU-h")
    return new, notes


def _shape(g: dict[str, Any]) -> str:
    return f"{g['name']} ({g['count']}×{g['gpus_per_node']} {g['gpu']})"


def _number(text: str) -> float | None:
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _gpu(text: str, flag: str) -> GpuSpec:
    try:
        return get_gpu(text)
    except LookupError as exc:
        raise HetplanError(f"{flag} {exc}") from None


def _matching(groups: list[dict[str, Any]], key: str, flag: str) -> list[dict[str, Any]]:
    """Groups named `key` (case-insensitive), else all groups of GPU type `key`."""
    named = [g for g in groups if g["name"].lower() == key.lower()]
    if named:
        return named
    names = ", ".join(g["name"] for g in groups) or "none left"
    try:
        gpu = get_gpu(key).name
    except LookupError:
        raise HetplanError(f"{flag} {key!r}: no group or GPU type of that name in the cluster "
                           f"(groups: {names})") from None
    typed = [g for g in groups if get_gpu(g["gpu"]).name == gpu]
    if not typed:
        raise HetplanError(f"{flag} {key!r}: the cluster has no {gpu} group (groups: {names})")
    return typed


def _new_group(groups: list[dict[str, Any]], text: str,
               network_gbps: float | None) -> dict[str, Any]:
    m = _ADD.match(text)
    if not m:
        raise HetplanError(f"--add {text!r}: write \"COUNT TYPE\" (GPUs) or \"NODESxGPUS TYPE\", "
                           "e.g. --add \"8 H100-SXM5-80GB\" or --add \"2x8 A100\"")
    nodes_text, count_text, type_text = m.groups()
    gpu = _gpu(type_text, f"--add {text!r}:")
    count = int(count_text)
    if count < 1 or (nodes_text is not None and int(nodes_text) < 1):
        raise HetplanError(f"--add {text!r}: counts must be at least 1")
    like = next((g for g in reversed(groups) if get_gpu(g["gpu"]).name == gpu.name), None)
    group: dict[str, Any] = {"name": _fresh_name(groups, gpu.name), "gpu": gpu.name}
    if like is not None:
        per_node = like["gpus_per_node"]
        for key in ("intra_node", "intra_node_gb_per_s", "inter_node_gbps", "price_per_gpu_hour"):
            if key in like:
                group[key] = like[key]
    else:
        per_node = _GPUS_PER_NODE.get(gpu.name, DEFAULT_GPUS_PER_NODE)
        group["inter_node_gbps"] = _default_network(gpu)
    if nodes_text is not None:
        nodes, per_node = int(nodes_text), count
        if like is not None and per_node != like["gpus_per_node"]:
            group.pop("intra_node_gb_per_s", None)  # the copied link was for another node shape
    elif count <= per_node:
        nodes, per_node = 1, count
    elif count % per_node:
        fit = max(d for d in range(1, per_node + 1) if count % d == 0)
        raise HetplanError(f"--add {text!r}: {count} GPUs do not fill nodes of {per_node}; give "
                           f"the node shape as NODESxGPUS, e.g. \"{count // fit}x{fit} "
                           f"{type_text}\"")
    else:
        nodes = count // per_node
    if network_gbps is not None:
        group["inter_node_gbps"] = float(network_gbps)
    ordered = {"name": group["name"], "count": nodes, "gpu": gpu.name, "gpus_per_node": per_node}
    ordered.update({k: v for k, v in group.items() if k not in ordered})
    return ordered


def _default_network(gpu: GpuSpec) -> float:
    if gpu.name.startswith("GH200"):
        return _GH200_NETWORK_GBPS
    if gpu.intra_node_link == "pcie":
        return PCIE_NETWORK_GBPS
    return NETWORK_GBPS.get(gpu.generation, PCIE_NETWORK_GBPS)


def _fresh_name(groups: list[dict[str, Any]], gpu_name: str) -> str:
    base = re.sub(r"[^a-z0-9]", "", gpu_name.split("-")[0].lower()) or "gpu"
    if not base[0].isalpha():
        base = f"g{base}"
    taken = {g["name"].lower() for g in groups}
    for i in range(1, 1000):
        name = f"{base}-new" if i == 1 else f"{base}-new{i}"
        if name not in taken:
            return name
    raise HetplanError("--add: too many added groups")
