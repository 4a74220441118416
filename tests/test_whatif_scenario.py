"""Scenario edits on a cluster spec: what each edit does, and one-line refusals."""

from __future__ import annotations

import copy

import pytest

from planner.cluster import cluster_from_dict, load_cluster
from planner.errors import HetplanError
from planner.report.scenario import NETWORK_GBPS, PCIE_NETWORK_GBPS, edit_cluster


@pytest.fixture(scope="module")
def lab() -> dict:
    return load_cluster("lab-mixed").spec


def _counts(spec: dict) -> dict[str, int]:
    return cluster_from_dict(spec, "whatif").gpu_counts()


def test_add_remove_price(lab: dict) -> None:
    before = copy.deepcopy(lab)
    spec, notes = edit_cluster(lab, add=["8 H100-SXM5-80GB"], remove=["v100"],
                               price=["a100=1.2"])
    assert lab == before, "the input spec must stay untouched"
    assert _counts(spec) == {"A100-SXM4-80GB": 16, "T4": 8, "H100-SXM5-80GB": 8}
    h100 = next(g for g in spec["nodes"] if g["gpu"] == "H100-SXM5-80GB")
    assert (h100["count"], h100["gpus_per_node"]) == (1, 8)
    # No H100 in the cluster to copy: the DGX H100's 8 × 400 Gb/s.
    assert h100["inter_node_gbps"] == NETWORK_GBPS["hopper"] == 3200.0
    a100 = cluster_from_dict(spec).groups[0]
    assert a100.price_per_gpu_hour == 1.2
    assert notes == ["removed v100 (4×8 V100-SXM2-32GB)", "added h100-new (1×8 H100-SXM5-80GB)",
                     "price of a100 (A100-SXM4-80GB) set to $1.2/GPU-h"]


def test_add_copies_the_shape_of_the_same_type(lab: dict) -> None:
    spec, _ = edit_cluster(lab, add=["8 T4"])
    new = spec["nodes"][-1]
    # lab-mixed's T4 boxes hold 4 GPUs on 50 Gbit/s: 8 more T4 are two such boxes.
    assert (new["name"], new["count"], new["gpus_per_node"], new["inter_node_gbps"]) == (
        "t4-new", 2, 4, 50.0)
    assert _counts(spec)["T4"] == 16


def test_add_shapes_and_names(lab: dict) -> None:
    spec, _ = edit_cluster(lab, add=["2x8 L4", "4 L4", "16 H100"], network_gbps=400)
    l4a, l4b, h100 = spec["nodes"][-3:]
    assert (l4a["name"], l4a["count"], l4a["gpus_per_node"]) == ("l4-new", 2, 8)
    assert (l4b["name"], l4b["count"], l4b["gpus_per_node"]) == ("l4-new2", 1, 4)
    assert (h100["count"], h100["gpus_per_node"]) == (2, 8)
    assert {g["inter_node_gbps"] for g in (l4a, l4b, h100)} == {400.0}
    spec, _ = edit_cluster(lab, add=["8 L4"])
    assert spec["nodes"][-1]["inter_node_gbps"] == PCIE_NETWORK_GBPS


def test_remove_by_gpu_type_and_price_by_type(lab: dict) -> None:
    spec, _ = edit_cluster(lab, remove=["V100-SXM2-32GB"], price=["T4=0.5"])
    assert _counts(spec) == {"A100-SXM4-80GB": 16, "T4": 8}
    assert cluster_from_dict(spec).groups[-1].price_per_gpu_hour == 0.5


@pytest.mark.parametrize(("edit", "message"), [
    ({"add": ["H100"]}, "write \"COUNT TYPE\""),
    ({"add": ["12 H100"]}, "12 GPUs do not fill nodes of 8; give the node shape as NODESxGPUS, "
                           "e.g. \"2x6 H100\""),
    ({"add": ["8 H1000"]}, "unknown GPU type"),
    ({"add": ["0 H100"]}, "at least 1"),
    ({"remove": ["x100"]}, "no group or GPU type of that name in the cluster"),
    ({"remove": ["L4"]}, "the cluster has no L4 group"),
    ({"remove": ["a100", "v100", "t4"]}, "leave no GPUs"),
    ({"price": ["a100"]}, "write KEY=USD"),
    ({"price": ["a100=-1"]}, "write KEY=USD"),
    ({"price": ["a100=cheap"]}, "write KEY=USD"),
])
def test_bad_scenarios_are_one_line(lab: dict, edit: dict, message: str) -> None:
    with pytest.raises(HetplanError, match=message.replace("(", r"\(")) as info:
        edit_cluster(lab, **edit)
    assert "\n" not in str(info.value)
