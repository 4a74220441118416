"""`hetplan launch PLAN.json [--out-dir DIR]`: one torchrun script per node, plus the rank map.

The plan is checked against its model and cluster (or `--cluster`) and refused when it does
not fit (exit 3); the folder is written all or nothing (`planner.runtime.outdir`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from planner.cli.main import app
from planner.cli.options import finite_option
from planner.cli.output import console, print_json
from planner.cli.plan_file import load_checked, refuse_infeasible

__all__ = ["launch"]


@app.command()
def launch(
    plan_file: Annotated[Path, typer.Argument(help="A plan JSON (from `hetplan plan -o`).")],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the scripts go.")] = Path(
        "launch"),
    cluster: Annotated[str | None, typer.Option(
        "--cluster", help="The cluster to run on (name or YAML); the plan is checked against "
        "it (default: the cluster the plan embeds).")] = None,
    rdzv: Annotated[str, typer.Option(
        "--rdzv", help="torchrun rendezvous: static (--node-rank per script) | c10d (elastic; "
        "allows --max-restarts).")] = "static",
    max_restarts: Annotated[int, typer.Option(
        "--max-restarts", min=0, max=1000,
        help="Restart every worker up to N times after a failure "
        "(c10d; training starts again at step 0).")] = 0,
    hostfile: Annotated[Path | None, typer.Option(
        "--hostfile", help="`plan-node host` per line: the machine of each plan node, for "
        "run_ssh.sh and the Slurm script (default: node names are host names).")] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535,
                                      help="Rendezvous port.")] = 29500,
    data: Annotated[str | None, typer.Option(
        "--data", help="Token file or folder of *.bin (flat uint16/uint32 ids) the runtime "
        "trains on, as the nodes see the path (default: synthetic tokens).")] = None,
    data_dtype: Annotated[str, typer.Option("--data-dtype", help="uint16 | uint32.")] = "uint16",
    data_seed: Annotated[int | None, typer.Option(
        "--data-seed", min=0, max=2**31 - 1,
        help="Where in the token stream sampling starts (runtime default 0).")] = None,
    lr: Annotated[float | None, typer.Option(
        "--lr", min=0, callback=finite_option,
        help="Peak learning rate (runtime default 1e-4).")] = None,
    min_lr: Annotated[float | None, typer.Option(
        "--min-lr", min=0, callback=finite_option,
        help="Cosine-decay the lr to this after warm-up.")] = None,
    warmup_steps: Annotated[int | None, typer.Option(
        "--warmup-steps", min=0, help="Linear lr warm-up steps.")] = None,
    decay_steps: Annotated[int | None, typer.Option(
        "--decay-steps", min=1, help="Step the cosine reaches --min-lr (default: the run's "
        "last step).")] = None,
    save_checkpoint: Annotated[str | None, typer.Option(
        "--save-checkpoint", help="Checkpoint folder, as the nodes see it (shared).")] = None,
    save_every: Annotated[int | None, typer.Option(
        "--save-every", min=1, help="Save a checkpoint every N steps (and at the end).")] = None,
    resume: Annotated[str | None, typer.Option(
        "--resume", help="Continue from this checkpoint (same model, any plan).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Write one torchrun script per node, ranks.tsv, run_ssh.sh and a Slurm script."""
    from planner.costing.framework import framework_of
    from planner.errors import HetplanError
    from planner.runtime.launch import LaunchOptions, read_hostfile, write_scripts
    from planner.runtime.outdir import check_out_dir

    if rdzv not in ("static", "c10d"):
        raise HetplanError(f"--rdzv {rdzv!r}: use static or c10d")
    check_out_dir(out_dir)  # before reading and checking the plan, as every output path

    checked = load_checked(plan_file, cluster)
    refuse_infeasible(checked, "launch")
    plan = checked.plan
    if cluster is not None:
        # The scripts' plan.json describes the cluster it runs on.
        plan = plan.model_copy(update={"cluster": checked.cluster.spec})
    _check_factory(plan.model, plan_file)
    priced = framework_of(plan.predicted)
    if priced != "hetplan":
        # stderr, one line: the scripts still work, but the predictions describe another runtime.
        typer.echo(f"warning: {plan_file} was priced for {priced}; these scripts run hetplan's "
                   "runtime, so expect `hetplan estimate --framework hetplan`'s figures",
                   err=True)
    hosts = read_hostfile(hostfile, plan) if hostfile is not None else ()
    if data_dtype not in ("uint16", "uint32"):
        raise HetplanError(f"--data-dtype {data_dtype!r}: use uint16 or uint32")
    if save_every is not None and save_checkpoint is None:
        raise HetplanError("--save-every needs --save-checkpoint DIR (where to save)")
    flags = {"--data": data, "--data-dtype": data_dtype if data else None,
             "--data-seed": data_seed if data else None, "--lr": lr,
             "--min-lr": min_lr, "--warmup-steps": warmup_steps, "--decay-steps": decay_steps,
             "--save-checkpoint": save_checkpoint, "--save-every": save_every,
             "--resume": resume}
    train_args = tuple(str(x) for flag, value in flags.items() if value is not None
                       for x in (flag, value))
    opts = LaunchOptions(rdzv=rdzv, max_restarts=max_restarts, hosts=hosts,  # type: ignore[arg-type]
                         port=port, train_args=train_args)
    scripts = write_scripts(plan, out_dir, opts)
    if json_out:
        print_json({"out_dir": str(out_dir), "world_size": len(plan.ranks), "nodes": [
            {"node": s.node, "node_rank": s.node_rank, "nproc_per_node": s.nproc,
             "script": str(out_dir / s.filename), "plan_ranks": list(s.plan_ranks),
             "torch_ranks": list(s.torch_ranks)} for s in scripts]})
        return
    table = Table(title=f"launch scripts in {out_dir}/ (world size {len(plan.ranks)})")
    for col in ("node rank", "node", "procs", "plan ranks", "script"):
        table.add_column(col)
    for s in scripts:
        table.add_row(str(s.node_rank), s.node, str(s.nproc), _ranges(s.plan_ranks),
                      s.filename)
    console.print(table)
    console.print(f"copy {out_dir}/ to every node, then on each: ./<node>.sh MASTER_ADDR "
                  "[MASTER_PORT] [STEPS]  (MASTER_ADDR: node rank 0's address); or "
                  f"{out_dir}/run_ssh.sh, or `cd {out_dir} && sbatch hetplan.sbatch`")


def _check_factory(model: Any, plan_file: Path) -> None:
    """A plan made from a user's nn.Module runs through its recorded factory: refuse one
    without; warn (one line) when it cannot be imported here (the nodes may have it)."""
    from planner.errors import SpecError
    from planner.graph.embedded import is_module_model, load_factory

    if not is_module_model(model):
        return
    if model.get("factory") is None:
        load_factory(model, where=f"{plan_file}: model")  # raises: missing
    try:
        load_factory(model, where=f"{plan_file}: model")
    except SpecError as exc:
        typer.echo(f"warning: {exc} (every node must be able to import it)", err=True)


def _ranges(ranks: tuple[int, ...]) -> str:
    parts, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            a, b = ranks[start], ranks[i - 1]
            parts.append(str(a) if a == b else f"{a}-{b}")
            start = i
    return ",".join(parts)
