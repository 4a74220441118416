"""Cluster model: node groups, links, prices (records in model.py, loader in load.py)."""

from planner.cluster.load import cluster_from_dict, load_cluster
from planner.cluster.model import Cluster, Node, NodeGroup

__all__ = ["Cluster", "Node", "NodeGroup", "cluster_from_dict", "load_cluster"]
