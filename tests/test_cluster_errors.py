"""Every malformed cluster file gets one clear line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cluster import cluster_from_dict, load_cluster
from planner.errors import SpecError

GROUP = """\
  - name: a100
    count: 2
    gpu: A100-SXM4-80GB
    gpus_per_node: 8
    intra_node: nvlink
    inter_node_gbps: 800
"""
GOOD = "name: lab\nnodes:\n" + GROUP


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


# (case id, file text, field named in the message or None for the whole file, words in message)
CASES = [
    ("empty", "", None, "empty"),
    ("only comments", "# nothing here\n\n", None, "holds no data"),
    ("whitespace", "   \n\t\n", None, "empty"),
    ("not yaml", "name: [unclosed\nnodes: 3\n", None, "not valid YAML at line"),
    ("tab indent", "name: x\nnodes:\n\t- name: a\n", None, "not valid YAML"),
    ("a list", "- a100\n- v100\n", None, "must be a YAML mapping"),
    ("a scalar", "just words\n", None, "must be a YAML mapping"),
    ("duplicate key", _with("    count: 2\n", "    count: 2\n    count: 3\n"), None,
     "'count' appears twice"),
    ("no name", GOOD.replace("name: lab\n", ""), "name", "required"),
    ("no nodes", "name: lab\n", "nodes", "required"),
    ("empty nodes", "name: lab\nnodes: []\n", "nodes", "at least one node group"),
    ("nodes a string", "name: lab\nnodes: a100\n", "nodes", "must be a list"),
    ("group a string", "name: lab\nnodes:\n  - a100\n", "nodes[0]", "mapping"),
    ("unknown top field", GOOD + "nodez: []\n", "nodez", "unknown field"),
    ("unknown group field", _with("    count: 2\n", "    count: 2\n    gpus: 8\n"),
     "nodes[0].gpus", "allowed fields here: name, count, gpu, gpus_per_node"),
    ("negative count", _with("count: 2", "count: -2"), "nodes[0].count", ">= 1"),
    ("zero count", _with("count: 2", "count: 0"), "nodes[0].count", ">= 1"),
    ("fractional count", _with("count: 2", "count: 2.5"), "nodes[0].count", "whole number"),
    ("quoted count", _with("count: 2", "count: '2'"), "nodes[0].count", "whole number"),
    ("boolean count", _with("count: 2", "count: true"), "nodes[0].count", "whole number"),
    ("zero gpus", _with("gpus_per_node: 8", "gpus_per_node: 0"), "nodes[0].gpus_per_node",
     ">= 1"),
    ("too many gpus", _with("gpus_per_node: 8", "gpus_per_node: 64"),
     "nodes[0].gpus_per_node", "<= 16"),
    ("unknown gpu", _with("A100-SXM4-80GB", "A100-SXM4-8"), "nodes[0].gpu",
     "did you mean A100-SXM4-80GB?"),
    ("gpu a number", _with("gpu: A100-SXM4-80GB", "gpu: 3090"), "nodes[0].gpu",
     "must be a string"),
    ("gpu missing", _with("    gpu: A100-SXM4-80GB\n", ""), "nodes[0].gpu", "required"),
    ("bad link", _with("intra_node: nvlink", "intra_node: infiniband"), "nodes[0].intra_node",
     "must be one of 'nvlink' or 'pcie'"),
    ("no network speed", _with("    inter_node_gbps: 800\n", ""), "nodes[0].inter_node_gbps",
     "required"),
    ("negative network", _with("inter_node_gbps: 800", "inter_node_gbps: -100"),
     "nodes[0].inter_node_gbps", "> 0"),
    ("nan network", _with("inter_node_gbps: 800", "inter_node_gbps: .nan"),
     "nodes[0].inter_node_gbps", "finite"),
    ("network with unit", _with("inter_node_gbps: 800", "inter_node_gbps: 800 Gbps"),
     "nodes[0].inter_node_gbps", "must be a number"),
    ("negative price", GOOD + "    price_per_gpu_hour: -1\n", "nodes[0].price_per_gpu_hour",
     ">= 0"),
    ("two intra units", GOOD + "    intra_node_gbps: 800\n    intra_node_gb_per_s: 100\n",
     "nodes[0].intra_node_gbps", "not both"),
    ("nvlink on T4", _with("gpu: A100-SXM4-80GB", "gpu: T4"), "nodes[0].intra_node",
     "T4 has no NVLink"),
    ("bridge for 8 GPUs", _with("gpu: A100-SXM4-80GB", "gpu: A100-PCIE-40GB"),
     "nodes[0].intra_node", "joins pairs only"),
    ("group name with space", _with("name: a100", "name: a 100"), "nodes[0].name",
     "not a valid group name"),
    ("group name with slash", _with("name: a100", "name: a100/x"), "nodes[0].name",
     "not a valid group name"),
    ("group name starts with digit", _with("name: a100", "name: '100'"), "nodes[0].name",
     "starting with a letter"),
    ("group name empty", _with("name: a100", "name: ''"), "nodes[0].name",
     "not a valid group name"),
    ("cluster name with space", GOOD.replace("name: lab", "name: my lab"), "name",
     "not a valid cluster name"),
    ("duplicate groups", GOOD + GROUP, "nodes[1].name", "used twice"),
    ("node name clash", GOOD + GROUP.replace("name: a100", "name: a100-1")
     .replace("count: 2", "count: 1"), "nodes[1].name", "clashes with group 'a100'"),
    ("zero latency", GOOD + "network:\n  latency_us: 0\n", "network.latency_us", "> 0"),
    ("network a string", GOOD + "network: fast\n", "network", "mapping"),
    ("unknown network field", GOOD + "network:\n  bandwidth: 10\n", "network.bandwidth",
     "allowed fields here: latency_us"),
]


@pytest.mark.parametrize("label,text,field,words", CASES, ids=[c[0] for c in CASES])
def test_malformed_cluster_file(
    tmp_path: Path, label: str, text: str, field: str | None, words: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_cluster(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    if field is not None:
        assert message.startswith(f"{path}: {field}: "), message
        assert info.value.field == field
    assert words in message, message
    assert "\n" not in message, message


def test_good_base_case_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert load_cluster(path).world_size == 16


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(SpecError, match="cannot read the cluster file"):
        load_cluster(path)


def test_dict_errors_name_where() -> None:
    with pytest.raises(SpecError) as info:
        cluster_from_dict({"name": "c", "nodes": "x"}, where="plan.json: cluster")
    assert str(info.value).startswith("plan.json: cluster: nodes: ")
    with pytest.raises(SpecError, match="^cluster: a cluster must be a mapping"):
        cluster_from_dict(["not", "a", "mapping"])
