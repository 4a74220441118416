"""Write a cluster spec back as a cluster YAML file that `load_cluster` reads unchanged.

    write_cluster_yaml(cluster.spec, "edited.yaml")
    assert load_cluster("edited.yaml").spec == cluster.spec

The spec is the normalized one (`Cluster.spec`: catalog values resolved, fixed key order), so the
file states every link and price the plan was made with, in the cluster file's own field names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from planner.outfile import write_output

__all__ = ["cluster_yaml", "write_cluster_yaml"]


def cluster_yaml(spec: dict[str, Any], comment: str = "") -> str:
    """The spec as cluster-file YAML text, `comment` lines first (as `# ...`)."""
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100)


def write_cluster_yaml(spec: dict[str, Any], path: str | Path, comment: str = "",
                       flag: str | None = None) -> Path:
    """Write `spec` to `path` all or nothing (`planner.outfile`); one HetplanError line when
    the file cannot be written."""
    return write_output(path, cluster_yaml(spec, comment), flag)
