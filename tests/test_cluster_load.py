"""Bundled clusters load, round-trip, and describe the machines their sources describe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cluster import Cluster, cluster_from_dict, load_cluster
from planner.cluster.load import CLUSTERS_DIR, bundled_clusters
from planner.errors import SpecError

REQUIRED = {
    "lab-mixed", "aws-p4d-p3", "h100-a100", "consumer-rtx", "amp-het", "dgx-a100", "amp-t4",
    "clariden-gh200", "mit-het", "bench-64", "bench-1024",
}


def test_required_clusters_are_bundled() -> None:
    assert set(bundled_clusters()) >= REQUIRED


@pytest.mark.parametrize("name", bundled_clusters())
def test_every_bundled_cluster_loads_and_round_trips(name: str) -> None:
    cluster = load_cluster(CLUSTERS_DIR / f"{name}.yaml")
    assert cluster.name == name
    again = cluster_from_dict(cluster.spec)
    assert again == cluster
    assert json.dumps(again.spec) == json.dumps(cluster.spec)
    # Every file says where its shape comes from.
    assert (CLUSTERS_DIR / f"{name}.yaml").read_text().startswith("#")
    names = [n.name for n in cluster.nodes]
    assert len(names) == len(set(names))
    assert cluster.world_size == sum(g.count * g.gpus_per_node for g in cluster.groups)


# GPU counts per type from the clusters' sources (AMP paper and data README, Sailor's plans,
# the benchmark definitions).
EXPECTED_GPUS = {
    "amp-het": {"V100-SXM2-16GB": 12, "T4": 4},  # AMP: 3 x p3.8xlarge + 1 x g4dn.12xlarge
    "amp-t4": {"T4": 16},  # AMP: 4 x g4dn.12xlarge
    "mit-het": {"RTX-3090": 8, "RTX-2080-Ti": 24, "TITAN-RTX": 16},  # Sailor mit/N6: 1+3+2 nodes
    "clariden-gh200": {"GH200-96GB": 128},
    "dgx-a100": {"A100-SXM4-80GB": 64},
}


@pytest.mark.parametrize("name,counts", sorted(EXPECTED_GPUS.items()))
def test_cluster_composition(name: str, counts: dict[str, int]) -> None:
    assert load_cluster(name).gpu_counts() == counts


def test_benchmark_clusters() -> None:
    small, large = load_cluster("bench-64"), load_cluster("bench-1024")
    assert small.world_size == 64 and len(small.gpu_counts()) == 3
    assert large.world_size == 1024
    assert {g.gpu.generation for g in large.groups} == {"hopper", "ampere", "volta", "ada"}


def test_amp_het_links_follow_the_instances() -> None:
    p3, g4dn = load_cluster("amp-het").groups
    assert (p3.gpus_per_node, p3.intra_node, p3.inter_node_gbps) == (4, "nvlink", 10.0)
    assert (g4dn.gpus_per_node, g4dn.intra_node, g4dn.inter_node_gbps) == (4, "pcie", 50.0)
    assert p3.intra_node_gb_per_s == 150.0  # V100 NVLink 300 GB/s both ways -> 150 one way
    assert g4dn.intra_node_gb_per_s == 16.0  # PCIe Gen3 x16 32 GB/s -> 16 one way


def test_node_naming_and_lookup() -> None:
    cluster = load_cluster("amp-het")
    assert [n.name for n in cluster.nodes] == ["p3-0", "p3-1", "p3-2", "g4dn"]
    assert cluster.node("p3-2").index == 2
    assert cluster.node("g4dn").group.gpu.name == "T4"
    assert cluster.group("p3").count == 3
    with pytest.raises(KeyError, match="no node 'p3-3'"):
        cluster.node("p3-3")
    with pytest.raises(KeyError, match="groups: p3, g4dn"):
        cluster.group("a100")


def _one_group(**fields) -> dict:
    group = {"name": "g", "count": 2, "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
             "inter_node_gbps": 200}
    group.update(fields)
    return {"name": "c", "nodes": [group]}


def test_intra_node_bandwidth_resolution() -> None:
    def bw(**fields) -> float:
        return cluster_from_dict(_one_group(**fields)).groups[0].intra_node_gb_per_s

    assert bw() == 300.0  # catalog's usual link for the SXM part: NVLink
    assert bw(intra_node="pcie") == 32.0
    assert bw(intra_node_gb_per_s=100) == 100.0
    assert bw(intra_node_gbps=800) == 100.0  # Gbit/s -> GB/s
    assert bw(gpu="A100-PCIE-40GB", gpus_per_node=2, intra_node="nvlink") == 300.0
    assert bw(gpu="T4", gpus_per_node=4) == 16.0


def test_prices_file_over_catalog() -> None:
    assert cluster_from_dict(_one_group(price_per_gpu_hour=1.2)).groups[0].price_per_gpu_hour == 1.2
    assert cluster_from_dict(_one_group()).groups[0].price_per_gpu_hour == 5.12
    assert cluster_from_dict(_one_group(gpu="RTX-4090", gpus_per_node=4)).groups[0] \
        .price_per_gpu_hour is None
    assert cluster_from_dict(_one_group(price_per_gpu_hour=0)).groups[0].price_per_gpu_hour == 0


def test_spec_is_normalized_and_deterministic() -> None:
    cluster = cluster_from_dict(_one_group(gpu="a100 80gb", price_per_gpu_hour=2))
    node = cluster.spec["nodes"][0]
    assert list(cluster.spec) == ["name", "nodes", "network"]
    assert list(node) == ["name", "count", "gpu", "gpus_per_node", "intra_node",
                          "intra_node_gb_per_s", "inter_node_gbps", "price_per_gpu_hour"]
    assert node["gpu"] == "A100-SXM4-80GB"
    assert cluster.spec["network"] == {"latency_us": 5.0}
    assert isinstance(cluster, Cluster)


def test_bare_name_and_path(tmp_path: Path) -> None:
    by_name = load_cluster("dgx-a100")
    by_path = load_cluster(str(CLUSTERS_DIR / "dgx-a100.yaml"))
    assert by_name == by_path
    with pytest.raises(SpecError) as info:
        load_cluster("no-such-cluster")
    assert "no such cluster file" in str(info.value) and "lab-mixed" in str(info.value)
    with pytest.raises(SpecError, match="no such cluster file"):
        load_cluster(tmp_path / "missing.yaml")
