"""Read and validate a cluster file (DESIGN.md's YAML) into a Cluster.

    cluster = load_cluster("planner/configs/clusters/lab-mixed.yaml")   # or just "lab-mixed"
    same = cluster_from_dict(cluster.spec)                      # the spec round-trips

Units: `inter_node_gbps` is the node's total network bandwidth in Gbit/s. `intra_node`
(nvlink | pcie) defaults to the GPU's usual link in the catalog; its bandwidth comes from the
catalog too (per GPU, one direction, GB/s) unless the file overrides it with
`intra_node_gb_per_s` (GB/s) or `intra_node_gbps` (Gbit/s, divided by 8), never both.
`price_per_gpu_hour` (USD) overrides the catalog's example price.

`Cluster.spec` is the normalized file: canonical GPU names, every catalog value resolved, fixed
key order, so a plan that embeds it needs neither the file nor this catalog version.

Every mistake raises SpecError naming the file and the field: the CLI prints it as one line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cost_models.catalog import get_gpu
from cost_models.mig import mig_profiles, split_mig_name
from planner.cluster.model import Cluster, NodeGroup
from planner.errors import SpecError
from planner.input_files import load_yaml_mapping
from planner.limits import MAX_CLUSTER_GPUS, MAX_NODES, limit_text

__all__ = [
    "CLUSTERS_DIR",
    "DEFAULT_LATENCY_US",
    "MAX_GPUS_PER_NODE",
    "bundled_clusters",
    "cluster_from_dict",
    "load_cluster",
]

# Package data (planner/configs/clusters), so a non-editable install keeps it.
CLUSTERS_DIR = Path(__file__).resolve().parents[1] / "configs" / "clusters"
MAX_GPUS_PER_NODE = 16
"""The largest single-node GPU counts shipped (HGX-2 / DGX-2: 16 V100 on NVSwitch)."""
DEFAULT_LATENCY_US = 5.0
"""Inter-node message latency when the file gives none: the DESIGN.md example, an
InfiniBand/EFA-class figure; Ethernet clusters should state their own (tens of us over TCP)."""

# Node names become `<group>-<i>`: letters, digits, `_` and `-`, starting with a letter,
# not ending with `-`, so they are safe in host files, file names and process-group labels.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")
_NAME_RULE = "1-40 characters: letters, digits, '_' or '-', starting with a letter"

_Positive = Annotated[float, Field(gt=0)]


class _Group(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    name: str
    count: Annotated[int, Field(ge=1, le=MAX_NODES)]
    gpu: str
    gpus_per_node: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE * 7)]  # 7: MIG slices
    intra_node: Literal["nvlink", "pcie"] | None = None
    intra_node_gb_per_s: _Positive | None = None
    intra_node_gbps: _Positive | None = None
    inter_node_gbps: _Positive
    price_per_gpu_hour: Annotated[float, Field(ge=0)] | None = None


class _Network(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    latency_us: _Positive = DEFAULT_LATENCY_US


class _ClusterFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    name: str
    description: str | None = None
    nodes: Annotated[list[_Group], Field(min_length=1)]
    network: _Network = _Network()


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after", "literal", "float", "int", "str", "list"):
            out += f".{part}" if out else str(part)
    return out


def _explain(error: dict[str, Any], model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    kind = error["type"]
    got = error.get("input")
    ctx = error.get("ctx") or {}
    shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        allowed = ", ".join(_fields_at(model, loc))
        return f"unknown field; allowed fields here: {allowed}"
    if kind in ("int_type", "int_from_float"):
        return f"must be a whole number, got {shown}"
    if kind in ("float_type",):
        return f"must be a number, got {shown}"
    if kind == "finite_number":
        return f"must be a finite number, got {shown}"
    if kind == "string_type":
        return f"must be a string (quote it in YAML), got {shown}"
    if kind in ("list_type",):
        return f"must be a list of node groups (`- name: ...` items), got {shown}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of fields, got {shown}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {shown}"
    if kind == "too_short":
        return "must list at least one node group"
    for key, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if key in ctx:
            return f"must be {word} {ctx[key]:g}, got {shown}"
    return f"{error['msg']}, got {shown}"


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    # Walk the location to the model that owns the unknown key, to list its fields.
    current: type[BaseModel] = model
    for part in loc[:-1]:
        if part == "nodes":
            current = _Group
        elif part == "network":
            current = _Network
    return list(current.model_fields)


def _validated(data: Any, where: str) -> _ClusterFile:
    if not isinstance(data, dict):
        raise SpecError(
            where, None, f"a cluster must be a mapping with `name` and `nodes`, got "
            f"{type(data).__name__} (see planner/configs/clusters/lab-mixed.yaml)"
        )
    try:
        return _ClusterFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        raise SpecError(where, _field_path(loc), _explain(error, _ClusterFile, loc)) from None


def _group(raw: _Group, index: int, where: str) -> NodeGroup:
    field = f"nodes[{index}]"
    if not _NAME.match(raw.name):
        raise SpecError(where, f"{field}.name", f"{raw.name!r} is not a valid group name "
                        f"({_NAME_RULE}): node names are built from it")
    try:
        gpu = get_gpu(raw.gpu)
    except LookupError as exc:
        raise SpecError(where, f"{field}.gpu", str(exc)) from None
    slices = split_mig_name(raw.gpu)
    per_gpu = 1 if slices is None else next(  # a node holds this many slices of each GPU
        p.max_instances for p in mig_profiles(get_gpu(slices[0])) if p.name == slices[1])
    if raw.gpus_per_node > MAX_GPUS_PER_NODE * per_gpu:
        unit = "GPUs" if per_gpu == 1 else f"slices ({MAX_GPUS_PER_NODE} GPUs × {per_gpu})"
        raise SpecError(where, f"{field}.gpus_per_node", f"must be <= "
                        f"{MAX_GPUS_PER_NODE * per_gpu} {unit}, got {raw.gpus_per_node}")
    if raw.intra_node_gb_per_s is not None and raw.intra_node_gbps is not None:
        raise SpecError(where, f"{field}.intra_node_gbps", "give intra_node_gb_per_s (GB/s) or "
                        "intra_node_gbps (Gbit/s), not both: they say the same thing")
    override = raw.intra_node_gb_per_s
    if raw.intra_node_gbps is not None:
        override = raw.intra_node_gbps / 8.0
    link = raw.intra_node or gpu.intra_node_link
    if override is not None:
        bandwidth = override
    elif link == "pcie":
        bandwidth = gpu.pcie_gb_per_s
    elif gpu.nvlink_gb_per_s is None:
        raise SpecError(where, f"{field}.intra_node", f"{gpu.name} has no NVLink; use "
                        "`intra_node: pcie`, or give intra_node_gb_per_s for another link")
    elif gpu.intra_node_link == "pcie" and raw.gpus_per_node > 2:
        raise SpecError(where, f"{field}.intra_node", f"{gpu.name}'s NVLink bridge joins pairs "
                        f"only, not {raw.gpus_per_node} GPUs; use `intra_node: pcie`, or give "
                        "intra_node_gb_per_s for your topology")
    else:
        bandwidth = gpu.nvlink_gb_per_s
    price = raw.price_per_gpu_hour
    return NodeGroup(
        name=raw.name,
        count=raw.count,
        gpu=gpu,
        gpus_per_node=raw.gpus_per_node,
        intra_node=link,
        intra_node_gb_per_s=float(bandwidth),
        inter_node_gbps=float(raw.inter_node_gbps),
        price_per_gpu_hour=float(price) if price is not None else gpu.price_per_gpu_hour,
    )


def _spec(name: str, description: str | None, groups: tuple[NodeGroup, ...],
          latency_us: float) -> dict[str, Any]:
    """The normalized cluster: catalog values resolved, fixed key order, so plans that embed it
    stay valid (and byte-identical) even if the catalog later changes."""
    nodes = []
    for g in groups:
        node: dict[str, Any] = {
            "name": g.name,
            "count": g.count,
            "gpu": g.gpu.name,
            "gpus_per_node": g.gpus_per_node,
            "intra_node": g.intra_node,
            "intra_node_gb_per_s": g.intra_node_gb_per_s,
            "inter_node_gbps": g.inter_node_gbps,
        }
        if g.price_per_gpu_hour is not None:
            node["price_per_gpu_hour"] = g.price_per_gpu_hour
        nodes.append(node)
    spec: dict[str, Any] = {"name": name}
    if description:
        spec["description"] = description
    spec["nodes"] = nodes
    spec["network"] = {"latency_us": latency_us}
    return spec


def cluster_from_dict(data: Any, where: str = "cluster") -> Cluster:
    """Validate a cluster given as plain data (a parsed file, or a plan's embedded `cluster`)."""
    parsed = _validated(data, where)
    if not _NAME.match(parsed.name):
        raise SpecError(where, "name", f"{parsed.name!r} is not a valid cluster name "
                        f"({_NAME_RULE})")
    groups = tuple(_group(raw, i, where) for i, raw in enumerate(parsed.nodes))
    total = sum(g.count * g.gpus_per_node for g in groups)
    if total > MAX_CLUSTER_GPUS:
        raise SpecError(where, "nodes", f"{total:,} GPUs in all, above hetplan's limit of "
                        f"{limit_text(MAX_CLUSTER_GPUS)}; check the node counts")
    seen_groups: dict[str, int] = {}
    seen_nodes: dict[str, str] = {}
    for i, g in enumerate(groups):
        if g.name in seen_groups:
            raise SpecError(where, f"nodes[{i}].name", f"group name {g.name!r} is used twice "
                            f"(also nodes[{seen_groups[g.name]}]); group names must be unique")
        seen_groups[g.name] = i
        for node in g.node_names():
            if node in seen_nodes:
                raise SpecError(where, f"nodes[{i}].name", f"node name {node!r} of group {g.name!r}"
                                f" clashes with group {seen_nodes[node]!r}; rename one group")
            seen_nodes[node] = g.name
    latency_us = float(parsed.network.latency_us)
    return Cluster(
        name=parsed.name,
        groups=groups,
        latency_us=latency_us,
        spec=_spec(parsed.name, parsed.description, groups, latency_us),
    )


def bundled_clusters() -> tuple[str, ...]:
    """Names of the clusters shipped in planner/configs/clusters/, sorted."""
    if not CLUSTERS_DIR.is_dir():
        return ()
    return tuple(sorted(p.stem for p in CLUSTERS_DIR.glob("*.yaml")))


def _resolve(path_or_name: str | Path) -> Path:
    path = Path(path_or_name)
    if path.exists() or isinstance(path_or_name, Path):
        return path
    text = str(path_or_name)
    if "/" in text or "\\" in text or text.endswith((".yaml", ".yml")):
        return path
    return CLUSTERS_DIR / f"{text}.yaml"


def load_cluster(path_or_name: str | Path) -> Cluster:
    """A cluster from a YAML file, or a bare name under planner/configs/clusters/ (`lab-mixed`)."""
    path = _resolve(path_or_name)
    where = str(path_or_name) if path.exists() else str(path)
    if not path.exists():
        names = ", ".join(bundled_clusters()) or "none"
        raise SpecError(where, None, f"no such cluster file; give a path or a bundled name "
                        f"({names})")
    data = load_yaml_mapping(path, where, what="cluster",
                             example="planner/configs/clusters/lab-mixed.yaml")
    return cluster_from_dict(data, where)
