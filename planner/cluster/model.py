"""Cluster records: groups of identical nodes, the links inside and between them, prices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cost_models.gpu import GpuSpec

__all__ = ["Cluster", "Node", "NodeGroup"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    """`count` identical nodes, each with `gpus_per_node` GPUs of one type."""

    name: str
    count: int
    gpu: GpuSpec
    gpus_per_node: int
    intra_node: Literal["nvlink", "pcie"]
    intra_node_gb_per_s: float
    """Per-GPU unidirectional bandwidth inside the node, GB/s (catalog value unless overridden)."""
    inter_node_gbps: float
    """The node's total network bandwidth, Gbit/s, shared by its GPUs."""
    price_per_gpu_hour: float | None
    """USD per GPU-hour (the file's value, else the catalog's example price, else None)."""

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node

    def node_names(self) -> tuple[str, ...]:
        """`<group>-<i>` for i in range(count), or `<group>` when count is 1 (DESIGN.md)."""
        if self.count == 1:
            return (self.name,)
        return tuple(f"{self.name}-{i}" for i in range(self.count))


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One machine of a group."""

    name: str
    group: NodeGroup
    index: int
    """Index of the node within its group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    name: str
    groups: tuple[NodeGroup, ...]
    latency_us: float
    """Per-message network latency between nodes (alpha), microseconds."""
    spec: dict[str, Any]
    """The validated file contents, embedded verbatim in plans (self-contained plan files)."""

    @property
    def nodes(self) -> tuple[Node, ...]:
        """All nodes in file order; global ranks are assigned in this order."""
        return tuple(
            Node(name=name, group=g, index=i)
            for g in self.groups
            for i, name in enumerate(g.node_names())
        )

    @property
    def world_size(self) -> int:
        return sum(g.gpus for g in self.groups)

    def group(self, name: str) -> NodeGroup:
        """The node group called `name`; KeyError naming the groups if there is none."""
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"cluster {self.name!r} has no node group {name!r}; groups: "
                       f"{', '.join(g.name for g in self.groups)}")

    def node(self, name: str) -> Node:
        """The node called `name` (`<group>-<i>` or `<group>`); KeyError if there is none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"cluster {self.name!r} has no node {name!r}")

    def gpu_counts(self) -> dict[str, int]:
        """GPU type name -> number of GPUs, in file order."""
        counts: dict[str, int] = {}
        for g in self.groups:
            counts[g.gpu.name] = counts.get(g.gpu.name, 0) + g.gpus
        return counts
