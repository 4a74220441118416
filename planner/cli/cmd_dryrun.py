"""`hetplan dryrun PLAN.json [--json] [--steps N]`: run the plan's structure on CPU with gloo.

One process per rank on this machine, the plan's depth at a tiny width; every step's loss and
every gradient are compared with a single-process run of the same model on the same batch.
The plan is checked against its model and cluster first (the one plan validator) and one
that does not fit its GPUs is refused (exit 3, with the numbers) unless --allow-infeasible.
Exit code 1 when they disagree (beyond 1e-5) or a worker fails (one line naming the rank:
an exception, a kill such as the out-of-memory killer's, or no progress for --timeout-s),
2 for a bad plan file, 3 for a plan that does not fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.cli.main import app
from planner.cli.options import finite_option
from planner.cli.output import console, print_json
from planner.cli.plan_file import load_checked, refuse_infeasible
from planner.cli.progress import spinner

__all__ = ["dryrun"]


@app.command()
def dryrun(
    plan_file: Annotated[Path, typer.Argument(help="A plan JSON (from `hetplan plan -o`).")],
    steps: Annotated[int, typer.Option("--steps", min=1, max=10_000,
        help="Training steps to compare.")] = 3,
    max_ranks: Annotated[int, typer.Option(
        "--max-ranks", min=1, max=1024,
        help="Most worker processes to start (larger plans shrink DP).")
    ] = 16,
    timeout_s: Annotated[float, typer.Option(
        "--timeout-s", min=1, callback=finite_option,
        help="Stop when no worker makes progress for this long "
        "(a stalled or deadlocked plan).")] = 120.0,
    memory_gib: Annotated[float | None, typer.Option(
        "--memory-gib", min=0.1, callback=finite_option,
        help="Host memory the workers may use (default: what is "
        "available now); a run estimated above it is refused.")] = None,
    allow_infeasible: Annotated[bool, typer.Option(
        "--allow-infeasible", help="Run a plan that does not fit its GPUs' memory anyway "
        "(dryrun runs it at a tiny width).")] = False,
    save_checkpoint: Annotated[Path | None, typer.Option(
        "--save-checkpoint", help="Save a checkpoint into this folder after the last step "
        "(DCP, by global name: a plan of other TP/PP/DP can resume it).")] = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue from a checkpoint of the same model (any plan); the "
        "reference trains the earlier steps itself, uninterrupted.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    timing: Annotated[bool, typer.Option(
        "--timing", help="With --json: add the run's wall time (wall_s), the one field that "
        "differs between identical runs.")] = False,
) -> None:
    """Run a plan on this CPU (gloo, tiny width) and check it against a one-process reference."""
    from planner.runtime.dry_run import TOLERANCE
    from planner.runtime.dry_run import dryrun as run_dryrun
    from planner.runtime.local import WorkerError

    checked = load_checked(plan_file)
    if not allow_infeasible:
        refuse_infeasible(checked, "dryrun")
    try:
        with spinner(f"dry run of {plan_file}", enabled=not json_out):
            res = run_dryrun(
                checked.plan, steps=steps, max_ranks=max_ranks, timeout_s=timeout_s,
                memory_gib=memory_gib,
                save_checkpoint=None if save_checkpoint is None else str(save_checkpoint),
                resume=None if resume is None else str(resume))
    except WorkerError as exc:
        typer.echo(f"error: dryrun failed: {exc}", err=True)
        raise typer.Exit(1) from None
    if json_out:
        print_json(res.to_dict(timing=timing))
    else:
        for note in res.notes:
            console.print(f"note: {note}")
        m = res.model
        heads = f" ({m['num_attention_heads']} heads)" if "num_attention_heads" in m else ""
        console.print(f"{res.ranks} processes, model {m['num_layers']} layers × hidden "
                      f"{m['hidden_size']}{heads}, vocab "
                      f"{m['vocab_size']}, seq {m['seq_len']}; {res.params_checked} parameters' "
                      f"gradients compared each step")
        table = Table(title=f"dryrun of {plan_file}")
        for col in ("step", "loss", "reference loss", "difference"):
            table.add_column(col, justify="right")
        for i, (a, b) in enumerate(zip(res.losses, res.reference_losses, strict=True),
                                   res.first_step + 1):
            table.add_row(str(i), f"{a:.6f}", f"{b:.6f}", f"{abs(a - b):.2e}")
        console.print(table)
        verdict = "[green]ok[/green]" if res.ok else "[red]MISMATCH[/red]"
        console.print(f"max |grad diff| {res.max_grad_diff:.2e}, max |param diff| "
                      f"{res.max_param_diff:.2e}, max |loss diff| "
                      f"{res.max_loss_diff:.2e} (tolerance {TOLERANCE:.0e}): {verdict}  "
                      f"[{res.wall_s:.1f} s]")
    if not res.ok:
        raise typer.Exit(1)
