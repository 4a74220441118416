"""Cluster model: node groups, links, prices (loader in load.py)."""

from planner.cluster.model import Cluster, Node, NodeGroup

__all__ = ["Cluster", "Node", "NodeGroup"]
