"""Launch scripts: one shell script per node, each running torchrun with the plan.

torchrun numbers global ranks node by node: with `--node-rank n` (static rendezvous, the
default with --master-addr) node n's local rank l becomes global rank
(processes on nodes 0..n-1) + l, even when nodes run different process counts. The scripts
number the nodes in the order of their lowest plan rank, so a plan that counts ranks node
by node gets torch rank = plan rank; any other numbering is mapped by the runtime through
the plan's rank table (topology.torch_rank_map). Pure Python, no torch import.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from planner.runtime.topology import node_order, torch_rank_map
from planner.schema import Plan

__all__ = ["NodeScript", "node_scripts", "write_scripts"]


@dataclass(frozen=True)
class NodeScript:
    node: str
    node_rank: int
    nproc: int
    plan_ranks: tuple[int, ...]
    """Plan rank of local rank 0, 1, ... on this node."""
    torch_ranks: tuple[int, ...]
    filename: str
    text: str


def _safe(node: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in node)


def node_scripts(plan: Plan, plan_file: str = "plan.json") -> list[NodeScript]:
    """The per-node scripts; `plan_file` is the plan's path relative to the script's folder."""
    nodes = node_order(plan)
    to_torch = torch_rank_map(plan)
    world = len(plan.ranks)
    out = []
    for node_rank, (node, nproc) in enumerate(nodes):
        mine = sorted((r for r in plan.ranks if r.node == node), key=lambda r: r.local_rank)
        plan_ranks = tuple(r.rank for r in mine)
        torch_ranks = tuple(to_torch[r] for r in plan_ranks)
        rows = "\n".join(f"#   local {r.local_rank}  ->  plan rank {r.rank}, torch rank "
                         f"{to_torch[r.rank]}" for r in mine)
        text = f"""#!/usr/bin/env bash
# hetplan launch script for node {node}: node rank {node_rank} of {len(nodes)}, {nproc} processes.
# Run the script of every node (same folder copied to each), node rank 0's address first:
#   ./{_safe(node)}.sh MASTER_ADDR [MASTER_PORT] [STEPS]
# World size {world}. Rank map on this node:
{rows}
set -euo pipefail
MASTER_ADDR="${{1:?usage: $0 MASTER_ADDR [MASTER_PORT] [STEPS]}}"
MASTER_PORT="${{2:-29500}}"
STEPS="${{3:-10}}"
HERE="$(cd "$(dirname "$0")" && pwd)"
export HETPLAN_NODE={shlex.quote(node)}
exec torchrun --nnodes {len(nodes)} --node-rank {node_rank} --nproc-per-node {nproc} \\
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\
  -m planner.runtime "$HERE/{plan_file}" --steps "$STEPS"
"""
        out.append(NodeScript(node, node_rank, nproc, plan_ranks, torch_ranks,
                              f"{_safe(node)}.sh", text))
    return out


def write_scripts(plan: Plan, out_dir: str | Path) -> list[NodeScript]:
    """plan.json, one executable script per node and ranks.tsv into `out_dir`; returns the
    scripts written (file names relative to `out_dir`)."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    plan.save(d / "plan.json")
    scripts = node_scripts(plan)
    for s in scripts:
        p = d / s.filename
        p.write_text(s.text)
        p.chmod(0o755)
    lines = ["plan_rank\tnode\tnode_rank\tlocal_rank\ttorch_rank"]
    for s in scripts:
        for local, (pr, tr) in enumerate(zip(s.plan_ranks, s.torch_ranks, strict=True)):
            lines.append(f"{pr}\t{s.node}\t{s.node_rank}\t{local}\t{tr}")
    (d / "ranks.tsv").write_text("\n".join(lines) + "\n")
    return scripts
