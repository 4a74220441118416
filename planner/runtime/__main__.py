"""`python -m planner.runtime PLAN.json --steps N`: what each torchrun worker runs."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import torch.distributed as dist

from planner.errors import HetplanError
from planner.outfile import check_output
from planner.schema import Plan


def _schedule(args: argparse.Namespace) -> Any:
    """The lr schedule the flags ask for (None: constant --lr)."""
    from planner.runtime.lr_schedule import LrSchedule

    if args.min_lr is None and not args.warmup_steps and args.decay_steps is None:
        return None
    try:
        return LrSchedule(peak_lr=args.lr, min_lr=args.min_lr, warmup_steps=args.warmup_steps,
                          decay_steps=args.decay_steps)
    except ValueError as exc:
        raise HetplanError(f"lr schedule: {exc}") from None


def _data(args: argparse.Namespace, plan: Plan) -> Any:
    if args.data is None:
        return None
    from planner.runtime.build import tokens_of
    from planner.runtime.data_file import TokenData

    seq_len, vocab = tokens_of(plan)
    return TokenData(args.data, seq_len, dtype=args.data_dtype, vocab_size=vocab,
                     seed=args.data_seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.runtime",
                                     description="Train a hetplan plan on this rank.")
    parser.add_argument("plan", help="plan JSON (from `hetplan plan`)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-4,
                        help="learning rate (the peak, with --warmup-steps / --min-lr)")
    parser.add_argument("--min-lr", type=float, default=None,
                        help="cosine-decay the lr to this after warm-up (default: no decay)")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="linear lr warm-up steps")
    parser.add_argument("--decay-steps", type=int, default=None,
                        help="the step the cosine reaches --min-lr (default: this run's last "
                        "step; pass it when the run will be resumed)")
    parser.add_argument("--data", default=None,
                        help="token file (flat uint16/uint32 token ids, like nanoGPT's .bin) or "
                        "a folder of *.bin; default: synthetic tokens")
    parser.add_argument("--data-dtype", choices=["uint16", "uint32"], default="uint16")
    parser.add_argument("--data-seed", type=int, default=0,
                        help="where sequential sampling starts in the token stream")
    parser.add_argument("--save-checkpoint", default=None, metavar="DIR",
                        help="save checkpoints into DIR (every --save-every steps and at the end)")
    parser.add_argument("--save-every", type=int, default=None, metavar="N")
    parser.add_argument("--resume", default=None, metavar="DIR",
                        help="continue from a checkpoint of the same model (any plan)")
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-grad-norm", type=float, default=None,
                        help="clip the global gradient norm (default: no clipping)")
    parser.add_argument("--run-log", default=None,
                        help="append one JSON line per step (plan, step, measured_iteration_s) "
                        "to this file on rank 0: `hetplan calibrate RUN_LOG` reads it")
    args = parser.parse_args(argv)
    if args.save_every is not None and (args.save_every < 1 or args.save_checkpoint is None):
        parser.error("--save-every N needs N >= 1 and --save-checkpoint DIR")
    if args.steps < 1 or not math.isfinite(args.lr) or args.lr <= 0 or (
            args.min_lr is not None and not math.isfinite(args.min_lr)):
        parser.error("--steps must be >= 1 and --lr / --min-lr finite, --lr > 0")
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
        schedule, data = _schedule(args), _data(args, plan)
        stats = train(plan, steps=args.steps, lr=args.lr, optimizer=args.optimizer,
                      seed=args.seed, max_grad_norm=args.max_grad_norm, data_loader=data,
                      lr_schedule=schedule, save_checkpoint=args.save_checkpoint,
                      save_every=args.save_every, resume=args.resume)
        if stats.torch_rank == 0 and args.run_log:
            from planner.runtime.run_log import append_run_log

            append_run_log(args.run_log, args.plan, stats.step_times_s)
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
