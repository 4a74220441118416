"""Launch scripts: one shell script per node, each running torchrun with the plan.

Two rendezvous modes:
- `static` (default): `--master-addr`/`--node-rank`. torchrun numbers global ranks node by
  node: node n's local rank l becomes global rank (processes on nodes 0..n-1) + l, even when
  nodes run different process counts. The scripts number the nodes in the order of their
  lowest plan rank, so a plan that counts ranks node by node gets torch rank = plan rank; any
  other numbering is mapped by the runtime through the plan's rank table
  (topology.torch_rank_map).
- `c10d`: torchrun's elastic rendezvous (`--rdzv-backend c10d`), which allows
  `--max-restarts` (a failed worker restarts every worker, training starts again at step 0).
  Node ranks are then assigned as nodes join, so each worker finds its plan rank from its
  node (HETPLAN_NODE) and LOCAL_RANK and the runtime gathers the torch → plan rank map.

Beside them: `run_ssh.sh` (starts every node's script over ssh) and `hetplan.sbatch` +
`slurm_node.sh` (one srun task per node, dispatched by host name); hosts come from a hostfile
(`plan-node host` per line), else the plan's node names are taken as host names. Pure Python,
no torch import.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from planner.errors import HetplanError
from planner.input_files import MAX_YAML_BYTES, read_text
from planner.runtime.outdir import write_folder
from planner.runtime.topology import node_order, torch_rank_map
from planner.schema import Plan

__all__ = ["LaunchOptions", "NodeScript", "node_scripts", "read_hostfile", "write_scripts"]

Rendezvous = Literal["static", "c10d"]


@dataclass(frozen=True)
class LaunchOptions:
    rdzv: Rendezvous = "static"
    max_restarts: int = 0
    """torchrun --max-restarts (c10d only)."""
    hosts: tuple[tuple[str, str], ...] = ()
    """(plan node, host name) pairs from a hostfile; empty: hosts are the plan's node names."""
    port: int = 29500
    train_args: tuple[str, ...] = ()
    """Extra arguments of `python -m planner.runtime` (data, lr schedule, checkpoints)."""

    def host_of(self, node: str) -> str:
        return dict(self.hosts).get(node, node)


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


def read_hostfile(path: str | Path, plan: Plan) -> tuple[tuple[str, str], ...]:
    """`plan-node host` per line (`#` comments, blank lines allowed); every node of the plan
    exactly once, every host once. One-line HetplanError naming the line otherwise."""
    p = Path(path)
    text = read_text(p, f"--hostfile {p}", what="host", max_bytes=MAX_YAML_BYTES)
    nodes = [n for n, _ in node_order(plan)]
    hosts: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise HetplanError(f"--hostfile {p}:{lineno}: expected `plan-node host`, got "
                               f"{line.strip()[:60]!r}")
        node, host = words
        if node not in nodes:
            raise HetplanError(f"--hostfile {p}:{lineno}: {node!r} is not a node of the plan "
                               f"({', '.join(nodes[:8])})")
        if node in hosts:
            raise HetplanError(f"--hostfile {p}:{lineno}: node {node} is listed twice")
        if host in hosts.values():
            raise HetplanError(f"--hostfile {p}:{lineno}: host {host} already serves another "
                               "node; each plan node needs its own machine")
        if not all(c.isalnum() or c in "-_." for c in host):
            raise HetplanError(f"--hostfile {p}:{lineno}: host {host!r} is not a host name")
        hosts[node] = host
    missing = [n for n in nodes if n not in hosts]
    if missing:
        raise HetplanError(f"--hostfile {p}: no host for plan node(s) {', '.join(missing[:8])}")
    return tuple((n, hosts[n]) for n in nodes)


def _torchrun(opts: LaunchOptions, n_nodes: int, node_rank: int, nproc: int) -> str:
    if opts.rdzv == "c10d":
        return (f"torchrun --nnodes {n_nodes} --nproc-per-node {nproc} \\\n"
                f"  --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\" "
                f"--rdzv-id \"${{HETPLAN_JOB_ID:-hetplan}}\" --max-restarts {opts.max_restarts}"
                " \\\n")
    return (f"torchrun --nnodes {n_nodes} --node-rank {node_rank} --nproc-per-node {nproc} "
            "\\\n  --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\\n")


def node_scripts(plan: Plan, plan_file: str = "plan.json",
                 opts: LaunchOptions | None = None) -> list[NodeScript]:
    """The per-node scripts; `plan_file` is the plan's path relative to the script's folder."""
    opts = opts or LaunchOptions()
    if opts.max_restarts and opts.rdzv != "c10d":
        raise HetplanError("--max-restarts needs --rdzv c10d (static rendezvous cannot restart "
                           "workers across nodes)")
    nodes = node_order(plan)
    to_torch = torch_rank_map(plan)
    world = len(plan.ranks)
    master = opts.host_of(nodes[0][0]) if opts.hosts else None
    addr = (f'MASTER_ADDR="${{1:-{master}}}"' if master else
            'MASTER_ADDR="${1:?usage: $0 MASTER_ADDR [MASTER_PORT] [STEPS]}"')
    out = []
    for node_rank, (node, nproc) in enumerate(nodes):
        mine = sorted((r for r in plan.ranks if r.node == node), key=lambda r: r.local_rank)
        plan_ranks = tuple(r.rank for r in mine)
        torch_ranks = tuple(to_torch[r] for r in plan_ranks)
        order = ("torch rank" if opts.rdzv == "static" else
                 "torch rank (static order; c10d assigns its own)")
        rows = "\n".join(f"#   local {r.local_rank}  ->  plan rank {r.rank}, {order} "
                         f"{to_torch[r.rank]}" for r in mine)
        rdzv = "" if opts.rdzv == "static" else "export HETPLAN_RDZV=c10d\n"
        run = _torchrun(opts, len(nodes), node_rank, nproc)
        # One flag per line; a flag's value on the flag's line.
        extra = "".join((" \\\n  " if a.startswith("--") else " ") + shlex.quote(a)
                        for a in opts.train_args)
        text = f"""#!/usr/bin/env bash
# hetplan launch script for node {node}: node rank {node_rank} of {len(nodes)}, {nproc} processes.
# Run the script of every node (same folder copied to each), node rank 0's address first:
#   ./{_safe(node)}.sh MASTER_ADDR [MASTER_PORT] [STEPS]
# Rendezvous: {opts.rdzv}. World size {world}. Rank map on this node:
{rows}
set -euo pipefail
{addr}
MASTER_PORT="${{2:-{opts.port}}}"
STEPS="${{3:-10}}"
HERE="$(cd "$(dirname "$0")" && pwd)"
export HETPLAN_NODE={shlex.quote(node)}
{rdzv}exec {run}  -m planner.runtime "$HERE/{plan_file}" --steps "$STEPS"{extra}
"""
        out.append(NodeScript(node, node_rank, nproc, plan_ranks, torch_ranks,
                              f"{_safe(node)}.sh", text))
    return out


def _ssh_script(scripts: list[NodeScript], opts: LaunchOptions) -> str:
    master = opts.host_of(scripts[0].node)
    starts = "\n".join(
        f"ssh {shlex.quote(opts.host_of(s.node))} \"cd $DIR && ./{s.filename} {master} "
        f"$MASTER_PORT $STEPS\" &\npids+=($!)" for s in scripts)
    return f"""#!/usr/bin/env bash
# Start every node's script on its host over ssh; this folder must sit at the same path on
# every host (or set DIR). Node rank 0 ({scripts[0].node}) runs on {master}.
#   ./run_ssh.sh [MASTER_PORT] [STEPS]
set -euo pipefail
DIR="${{DIR:-$(cd "$(dirname "$0")" && pwd)}}"
MASTER_PORT="${{1:-{opts.port}}}"
STEPS="${{2:-10}}"
pids=()
{starts}
status=0
for pid in "${{pids[@]}}"; do wait "$pid" || status=1; done
exit $status
"""


def _slurm_scripts(scripts: list[NodeScript], opts: LaunchOptions) -> tuple[str, str]:
    hosts = [opts.host_of(s.node) for s in scripts]
    master = hosts[0]
    sbatch = f"""#!/usr/bin/env bash
# Slurm: one task per plan node, on the hosts the plan's nodes map to (--hostfile, else the
# plan's node names). Submit from this folder:  sbatch hetplan.sbatch [STEPS]
#SBATCH --job-name=hetplan
#SBATCH --nodes={len(scripts)}
#SBATCH --ntasks-per-node=1
#SBATCH --nodelist={",".join(hosts)}
#SBATCH --exclusive
set -euo pipefail
HERE="${{SLURM_SUBMIT_DIR:-$(pwd)}}"
MASTER_PORT="${{MASTER_PORT:-{opts.port}}}"
export HETPLAN_JOB_ID="${{SLURM_JOB_ID:-hetplan}}"
srun --nodes={len(scripts)} --ntasks-per-node=1 --kill-on-bad-exit=1 \\
  "$HERE/slurm_node.sh" {master} "$MASTER_PORT" "${{1:-10}}"
"""
    cases = "\n".join(f"  {h}) exec \"$HERE/{s.filename}\" \"$@\" ;;"
                      for h, s in zip(hosts, scripts, strict=True))
    node = f"""#!/usr/bin/env bash
# Run by srun on every node of the job: starts this host's node script.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
HOST="${{SLURMD_NODENAME:-$(hostname -s)}}"
case "$HOST" in
{cases}
  *) echo "error: host $HOST serves no node of this plan (see hosts.tsv)" >&2; exit 2 ;;
esac
"""
    return sbatch, node


def render_files(plan: Plan, opts: LaunchOptions | None = None
                 ) -> tuple[list[NodeScript], dict[str, tuple[str, bool]]]:
    """The scripts and every file of a launch folder: name → (text, executable)."""
    opts = opts or LaunchOptions()
    scripts = node_scripts(plan, opts=opts)
    files: dict[str, tuple[str, bool]] = {"plan.json": (plan.to_json(), False)}
    for s in scripts:
        files[s.filename] = (s.text, True)
    lines = ["plan_rank\tnode\tnode_rank\tlocal_rank\ttorch_rank"]
    for s in scripts:
        for local, (pr, tr) in enumerate(zip(s.plan_ranks, s.torch_ranks, strict=True)):
            lines.append(f"{pr}\t{s.node}\t{s.node_rank}\t{local}\t{tr}")
    files["ranks.tsv"] = ("\n".join(lines) + "\n", False)
    files["hosts.tsv"] = ("node\thost\n" + "".join(
        f"{s.node}\t{opts.host_of(s.node)}\n" for s in scripts), False)
    files["run_ssh.sh"] = (_ssh_script(scripts, opts), True)
    sbatch, slurm_node = _slurm_scripts(scripts, opts)
    files["hetplan.sbatch"] = (sbatch, False)
    files["slurm_node.sh"] = (slurm_node, True)
    return scripts, files


def write_scripts(plan: Plan, out_dir: str | Path,
                  opts: LaunchOptions | None = None) -> list[NodeScript]:
    """plan.json, one executable script per node, ranks.tsv, hosts.tsv and the ssh and Slurm
    scripts into `out_dir`, all or nothing (a temporary folder renamed into place); returns
    the node scripts (file names relative to `out_dir`)."""
    if plan.model is None or plan.cluster is None:
        raise HetplanError("a plan file must embed its model and cluster specs")
    scripts, files = render_files(plan, opts)
    write_folder(Path(out_dir), files)
    return scripts
