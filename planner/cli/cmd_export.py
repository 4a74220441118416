"""`hetplan export PLAN.json --to megatron|torchtitan`: the plan as another framework's config.

Prints Megatron-LM arguments or a torchtitan TOML (`planner.export`). A plan the framework
cannot express is refused (exit 2) with the reason and the nearest plan it can express, with
that plan's predicted cost; `--nearest-out FILE` saves that plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.main import app
from planner.errors import HetplanError
from planner.outfile import check_output, write_output

__all__ = ["export"]


@app.command()
def export(
    plan_file: Annotated[str, typer.Argument(help="Plan JSON (from `hetplan plan`).")],
    to: Annotated[str, typer.Option("--to", help="megatron | torchtitan")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the config here "
                                             "instead of printing it.")] = None,
    nearest_out: Annotated[Path | None, typer.Option(
        "--nearest-out", help="When refused: save the nearest expressible plan here.")] = None,
) -> None:
    """Print the plan as Megatron-LM arguments or a torchtitan TOML."""
    from planner.cli.plan_file import load_checked
    from planner.export import TARGETS, NotExpressible, export_plan

    if to not in TARGETS:
        raise HetplanError(f"--to {to!r}: use one of {', '.join(TARGETS)}")
    for path, flag in ((out, "-o"), (nearest_out, "--nearest-out")):
        if path is not None:
            check_output(path, flag)
    # Checked against its model and cluster like every command that reads a plan: a broken
    # plan would otherwise be exported with only a "no prediction" comment.
    plan = load_checked(plan_file).plan
    try:
        text = export_plan(plan, to)
    except NotExpressible as exc:
        if exc.nearest is None:
            # nearest_uniform tries layouts over all GPUs of one type only: a smaller uniform
            # plan may well exist (a batch of 4 cannot spread over 64 GPUs).
            msg = (f"{exc}; and no uniform layout over all the GPUs of one type of this "
                   f"cluster fits (global batch {plan.global_batch_size}, one micro-batch per "
                   "stage at least); a uniform layout on fewer GPUs may fit (price one with "
                   "`hetplan estimate MODEL CLUSTER --tp N --pp N --dp N`)")
            raise HetplanError(msg) from None
        near, est = exc.nearest
        d = near.pipelines[0].stages
        shape = (f"the {d[0].gpu} GPUs of {near.cluster['name']}: TP {d[0].tp} × "
                 f"PP {len(near.device_groups(0))} × DP {len(near.pipelines)}, "
                 f"micro-batch {near.micro_batch_size}, "
                 f"recompute {d[0].recompute}")
        msg = (f"{exc}. Nearest expressible plan: {shape}, predicted "
               f"{est.iteration_time_s:.4f} s per iteration, {est.tokens_per_s:,.0f} tokens/s")
        if nearest_out is not None:
            from planner.costing import with_prediction

            with_prediction(near, est, to if to == "megatron" else None).save(nearest_out)
            msg += f" (saved to {nearest_out}; export that file)"
        else:
            msg += " (--nearest-out FILE saves it)"
        raise HetplanError(msg) from None
    if out is not None:
        write_output(out, text, "-o")
        print(f"wrote {out}")
    else:
        print(text, end="")
