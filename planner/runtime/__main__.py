"""`python -m planner.runtime PLAN.json --steps N`: what each torchrun worker runs."""

from __future__ import annotations

import argparse
import os
import sys

import torch.distributed as dist

from planner.errors import HetplanError
from planner.outfile import check_output
from planner.schema import Plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.runtime",
                                     description="Train a hetplan plan on this rank.")
    parser.add_argument("plan", help="plan JSON (from `hetplan plan`)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-grad-norm", type=float, default=None,
                        help="clip the global gradient norm (default: no clipping)")
    parser.add_argument("--run-log", default=None,
                        help="append one JSON line per step (plan, step, measured_iteration_s) "
                        "to this file on rank 0: `hetplan calibrate RUN_LOG` reads it")
    args = parser.parse_args(argv)
    from planner.costing.plan_check import check_plan
    from planner.runtime.training import train

    try:
        if args.run_log and os.environ.get("RANK", "0") == "0":
            # Rank 0 appends after the last step: a log it cannot write must stop the run
            # before training, not after it.
            check_output(args.run_log, "--run-log")
        plan = Plan.load(args.plan)
        # The one plan validator, as `hetplan launch` ran it: a plan edited since is caught
        # here, on every rank, before any process group forms.
        check_plan(plan, where=args.plan)
        stats = train(plan, steps=args.steps, lr=args.lr, optimizer=args.optimizer,
                      seed=args.seed, max_grad_norm=args.max_grad_norm)
        if stats.torch_rank == 0 and args.run_log:
            from planner.runtime.run_log import append_run_log

            append_run_log(args.run_log, args.plan, stats.times)
    except HetplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if stats.torch_rank == 0:
        print(f"done: {len(stats.losses)} steps, final loss {stats.losses[-1]:.4f}, "
              f"{stats.tokens_per_s:,.0f} tokens/s (steps after the first)")
        predicted = (plan.predicted or {}).get("tokens_per_s")
        if predicted:
            print(f"plan predicted {predicted:,.0f} tokens/s: measured / predicted = "
                  f"{stats.tokens_per_s / predicted:.2f}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
