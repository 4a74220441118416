"""MIG slices as devices: catalog entries, cluster files, `hetplan whatif --partition`.

The oracle is the NVIDIA MIG User Guide's profile names themselves: `Ng.Mgb` owns N of 7
compute slices and about M GB of memory.
"""

from __future__ import annotations

import json
import re

import pytest

from cost_models.catalog import get_gpu
from cost_models.mig import MIG_PROFILES
from planner.cluster import cluster_from_dict
from planner.errors import SpecError
from tests.cli import run_cli


@pytest.mark.parametrize("parent", sorted(MIG_PROFILES))
def test_every_profile_matches_its_name(parent):
    whole = get_gpu(parent)
    for profile in MIG_PROFILES[parent]:
        n, mem_gb = re.fullmatch(r"(\d)g\.(\d+)gb", profile.name).groups()
        g = get_gpu(f"{parent}:{profile.name}")
        assert profile.compute_sevenths == int(n)
        assert g.peak("fp16") == pytest.approx(whole.peak("fp16") * int(n) / 7)
        assert abs(g.memory_gib - int(mem_gb)) <= 0.5 + 1e-9, profile.name
        assert g.nvlink_gb_per_s is None and g.intra_node_link == "pcie"
        assert profile.compute_sevenths * profile.max_instances <= 7


def test_unknown_profile_names_the_valid_ones():
    with pytest.raises(LookupError, match="1g.10gb"):
        get_gpu("A100-SXM4-80GB:1g.5gb")
    with pytest.raises(LookupError, match="no MIG"):
        get_gpu("V100-SXM2-16GB:1g.5gb")


def _group(**kw):
    base = {"name": "mig", "count": 1, "gpu": "A100-SXM4-80GB:1g.10gb", "gpus_per_node": 56,
            "inter_node_gbps": 100}
    return {"name": "c", "nodes": [{**base, **kw}]}


def test_cluster_of_slices():
    c = cluster_from_dict(_group())
    assert c.world_size == 56 and c.groups[0].intra_node == "pcie"
    # 56 slices hold the compute of 8 GPUs.
    assert sum(g.gpu.peak("bf16") * g.gpus for g in c.groups) == pytest.approx(8 * 312)
    with pytest.raises(SpecError, match="no NVLink"):
        cluster_from_dict(_group(intra_node="nvlink"))
    with pytest.raises(SpecError, match=r"must be <= 112"):
        cluster_from_dict(_group(gpus_per_node=113))
    with pytest.raises(SpecError, match=r"must be <= 16 GPUs"):
        cluster_from_dict(_group(gpu="A100-SXM4-80GB", gpus_per_node=17))


def test_whatif_eight_gpus_against_56_slices(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("name: one\nnodes:\n  - {name: a100, count: 1, gpu: A100-SXM4-80GB, "
                    "gpus_per_node: 8, intra_node: nvlink, inter_node_gbps: 1600}\n")
    code, out, err = run_cli(["whatif", "tiny", str(path), "--partition",
                              "A100-SXM4-80GB:1g.10gb", "--global-batch", "56", "--json"],
                             capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["cluster_after"]["nodes"][0]["gpus_per_node"] == 56
    assert d["after"]["gpus_available"] == {"A100-SXM4-80GB:1g.10gb": 56}
    assert d["before"]["gpus_available"] == {"A100-SXM4-80GB": 8}
    code, out, err = run_cli(["whatif", "tiny", str(path), "--partition", "A100:9g.1gb"],
                             capsys)
    assert code == 2 and "1g.10gb" in err and len(err.strip().splitlines()) == 1
