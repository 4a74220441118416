"""docs/cluster-file.md documents every field the cluster loader accepts, and its example loads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from planner.cluster import cluster_from_dict
from planner.cluster import load as cluster_load

DOC = Path(__file__).resolve().parents[1] / "docs" / "cluster-file.md"


def _sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {p.splitlines()[0].strip(): p for p in parts[1:]}


def _documented(section: str) -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))


def test_every_accepted_field_is_documented() -> None:
    sections = _sections()
    for heading, model in (("Top level", cluster_load._ClusterFile),
                           ("A node group (`nodes[i]`)", cluster_load._Group),
                           ("`network`", cluster_load._Network)):
        assert _documented(sections[heading]) == set(model.model_fields), heading


def test_stated_defaults_and_limits_are_the_loaders() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"microseconds | {cluster_load.DEFAULT_LATENCY_US:g} |" in text
    assert f"at most {cluster_load.MAX_GPUS_PER_NODE} (" in text


def test_the_example_loads() -> None:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert block is not None
    cluster = cluster_from_dict(yaml.safe_load(block.group(1)), "docs/cluster-file.md")
    assert [n.name for n in cluster.nodes] == ["a100-0", "a100-1", "v100-0", "v100-1", "v100-2",
                                               "v100-3", "t4"]
    assert cluster.world_size == 2 * 8 + 4 * 8 + 4
    assert cluster.group("v100").intra_node_gb_per_s == 150.0
    assert cluster.latency_us == 5.0
