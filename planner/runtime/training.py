"""`train(plan, steps=N)`: run on every rank (torchrun starts them); builds this rank's share of
the plan, trains N steps on synthetic or user data, and reports losses and tokens/s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from planner.errors import HetplanError
from planner.graph.embedded import is_module_model, load_factory
from planner.runtime.build import build_for_rank, spec_of, tokens_of
from planner.runtime.checkpoint import (
    check_model,
    has_checkpoint,
    load_checkpoint,
    read_meta,
    runner_optimizers,
)
from planner.runtime.checkpoint import save_checkpoint as save_checkpoint_
from planner.runtime.data import synthetic_batch
from planner.runtime.engine import Runner
from planner.runtime.lr_schedule import LrSchedule, set_lr
from planner.runtime.precision import plan_precision, stage_dtypes, uses_loss_scaling
from planner.runtime.topology import torch_rank_map
from planner.schema import Plan

__all__ = ["TrainStats", "runtime_notes", "setup_rank", "train"]

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class TrainStats:
    """What one rank saw; losses are global (every micro-batch of every pipeline)."""

    plan_rank: int
    torch_rank: int
    losses: tuple[float, ...]
    step_times_s: tuple[float, ...]
    tokens_per_step: int
    tokens_per_s: float
    """Mean over the steps after the first (which pays for warm-up), or the one step."""
    notes: tuple[str, ...] = ()
    """Where this run departs from the plan's settings (same math, other speed or memory)."""


def runtime_notes(plan: Plan, device: torch.device,
                  rank: int = 0) -> tuple[list[str], torch.dtype | None, bool]:
    """What the runtime does differently from the plan, the autocast dtype of `rank` (None:
    fp32) and whether the plan scales its loss (`planner.runtime.precision`)."""
    precision = plan_precision(plan)
    if device.type != "cuda":
        notes = [] if precision == "fp32" else [f"precision {precision}: running fp32 on CPU"]
        return notes, None, False
    notes = []
    dtype = stage_dtypes(plan).get(rank, "fp32")
    if dtype == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        # The plan names a bf16 GPU but this device lacks bf16 tensor cores.
        dtype = "fp16"
        notes.append(f"rank {rank}: {torch.cuda.get_device_name(device)} has no bf16; "
                     "computing in fp16 with loss scaling")
    scaling = dtype == "fp16" or uses_loss_scaling(plan)
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)
    return notes, autocast, scaling


def _everyone_or_no_one(scaling: bool, device: torch.device) -> bool:
    """Loss scaling on every rank when any rank needs it: the scaler's overflow check is an
    all-reduce over the world (a rank's device may lack bf16 though its plan GPU has it)."""
    flag = torch.tensor([1.0 if scaling else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def setup_rank(plan: Plan) -> tuple[int, dict[int, int], torch.device]:
    """Join the default group (torchrun's env) and check it against the plan.

    Returns (plan rank, plan rank → torch rank, device). NCCL when CUDA is present, gloo else.
    """
    world = len(plan.ranks)
    if not dist.is_initialized():
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                   if k not in os.environ]
        if missing:
            raise HetplanError(f"no torch.distributed environment ({', '.join(missing)} unset): "
                               "start the runtime with torchrun (see `hetplan launch`)")
        if int(os.environ["WORLD_SIZE"]) != world:
            raise HetplanError(f"the plan has {world} ranks but torchrun started "
                               f"{os.environ['WORLD_SIZE']}; use the plan's launch scripts")
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if dist.get_world_size() != world:
        raise HetplanError(f"the plan has {world} ranks but the process group has "
                           f"{dist.get_world_size()}")
    elastic = os.environ.get("HETPLAN_RDZV") == "c10d"
    to_torch = _gathered_rank_map(plan) if elastic else torch_rank_map(plan)
    plan_rank = {t: p for p, t in to_torch.items()}[dist.get_rank()]
    info = next(r for r in plan.ranks if r.rank == plan_rank)
    local = os.environ.get("LOCAL_RANK")
    if local is not None and int(local) != info.local_rank:
        raise HetplanError(f"torch rank {dist.get_rank()} has LOCAL_RANK {local}, but the plan "
                           f"puts it at local rank {info.local_rank} of node {info.node}; start "
                           "nodes in the order and with the process counts of `hetplan launch`")
    node = os.environ.get("HETPLAN_NODE")
    if node is not None and node != info.node:
        raise HetplanError(f"torch rank {dist.get_rank()} runs on node {node!r}, but the plan "
                           f"puts plan rank {plan_rank} on {info.node!r}; check --node-rank")
    if dist.get_backend() == "nccl":
        count = torch.cuda.device_count()
        if info.local_rank >= count:
            raise HetplanError(f"node {info.node} has {count} GPUs visible, the plan uses local "
                               f"rank {info.local_rank}")
        torch.cuda.set_device(info.local_rank)
        return plan_rank, to_torch, torch.device("cuda", info.local_rank)
    return plan_rank, to_torch, torch.device("cpu")


def _gathered_rank_map(plan: Plan) -> dict[int, int]:
    """plan rank → torch rank under an elastic (c10d) rendezvous, which numbers nodes as they
    join: each worker names its plan rank from its node and LOCAL_RANK, and all gather."""
    node, local = os.environ.get("HETPLAN_NODE"), os.environ.get("LOCAL_RANK")
    if node is None or local is None:
        raise HetplanError("HETPLAN_RDZV=c10d needs HETPLAN_NODE and LOCAL_RANK (set by the "
                           "scripts of `hetplan launch --rdzv c10d`)")
    mine = [r.rank for r in plan.ranks if r.node == node and r.local_rank == int(local)]
    if dist.get_backend() == "nccl":
        torch.cuda.set_device(int(local))  # all_gather_object moves its bytes through CUDA
    # Gather before judging, so every worker stops with the same message (none waits).
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (node, int(local), mine[0] if mine else -1))
    lost = [f"{n}:{lr}" for n, lr, p in everyone if p < 0]
    if lost:
        raise HetplanError(f"workers {', '.join(lost[:4])} (node:local rank) serve no plan "
                           "rank; run each node's own script of `hetplan launch`")
    claimed = [p for _, _, p in everyone]
    if sorted(claimed) != sorted(r.rank for r in plan.ranks):
        raise HetplanError(f"the workers claim plan ranks {claimed}; start every node's script "
                           "exactly once")
    return {p: t for t, p in enumerate(claimed)}
    return {p: t for t, p in enumerate(everyone)}


def _batches(plan: Plan, data_loader: Any, seed: int) -> Callable[[int, int], Batch]:
    """(step, samples consumed before it) -> the global batch."""
    from planner.runtime.data_file import TokenData

    rows = plan.global_batch_size
    if isinstance(data_loader, TokenData):
        return lambda step, consumed: data_loader.batch(consumed, rows)
    if data_loader is None:
        if plan.model is None:
            raise HetplanError("synthetic data needs the plan's model spec (seq_len, vocab_size); "
                               "pass data_loader=")
        seq_len, vocab = tokens_of(plan)
        return lambda step, consumed: synthetic_batch(step, rows, seq_len, vocab, seed)
    if callable(data_loader):
        return lambda step, consumed: data_loader(step)
    it = iter(data_loader) if isinstance(data_loader, Iterable) else data_loader
    return lambda step, consumed: next(it)


def train(plan: Plan, *, steps: int, model_factory: Callable[[], Any] | None = None,
          data_loader: Any = None, lr: float = 1e-4, optimizer: str = "adamw", seed: int = 0,
          max_grad_norm: float | None = None, lr_schedule: LrSchedule | None = None,
          save_checkpoint: str | None = None, save_every: int | None = None,
          resume: str | None = None,
          log: Callable[[str], None] | None = print) -> TrainStats:
    """Train `steps` iterations of `plan` on this rank; call on every rank.

    model_factory: builds the whole model (embed, ordered layers, head; see stage.py) with
    the same weights on every rank; default: the plan's model spec, only this rank's layers.
    data_loader: `step -> (inputs, labels)` or an iterable of them, each the GLOBAL batch
    (global_batch_size rows, the same on every rank; each pipeline takes its rows), or a
    `TokenData` (token files, read sequentially); default: synthetic tokens.
    lr_schedule: warm-up + cosine (`lr_schedule.py`); default: constant `lr`.
    save_checkpoint: a folder; a checkpoint (`checkpoint.py`) goes there every `save_every`
    steps and after the last. resume: a checkpoint of the same model from any plan: its
    weights, optimizer state, step and data position are loaded and `steps` more run; the
    save_checkpoint folder itself before anything is saved there: a fresh start.
    """
    plan_rank, to_torch, device = setup_rank(plan)
    if model_factory is None and is_module_model(plan.model):
        model_factory = load_factory(plan.model)  # a plan made from the user's nn.Module
    if model_factory is not None:
        model, layout = model_factory(), None
    else:
        model, layout = build_for_rank(spec_of(plan), plan, plan_rank, seed=seed)
    notes, autocast, scaling = runtime_notes(plan, device, plan_rank)
    scaling = _everyone_or_no_one(scaling, device)
    runner = Runner(plan, plan_rank, to_torch, model, device, optimizer=optimizer, lr=lr,
                    autocast=autocast, layout=layout,
                    loss_scale=2.0**16 if scaling else None,
                    max_grad_norm=max_grad_norm)
    notes += runner.notes
    if log is not None and dist.get_rank() == 0:
        for note in notes:
            log(f"note: {note}")
    next_batch = _batches(plan, data_loader, seed)
    start, consumed, history = 0, 0, []
    if resume is not None and save_checkpoint is not None and not has_checkpoint(resume) \
            and Path(resume).resolve() == Path(save_checkpoint).resolve():
        # Resuming from the folder this run saves into, before its first save: a fresh
        # start, so that a restarted job (torchrun --max-restarts) picks up its own latest.
        if log is not None and dist.get_rank() == 0:
            log(f"no checkpoint in {resume} yet: starting at step 0")
        resume = None
    if resume is not None:
        meta = read_meta(resume)
        check_model(meta, plan.model)
        if meta.get("runs"):
            raise HetplanError(f"--resume {meta['folder']}: saved by `hetplan dryrun` at a tiny "
                               "width, not the model's size; resume a checkpoint of a training "
                               "run")
        load_checkpoint(runner, meta)
        start, consumed, history = meta["step"], meta["samples"], meta["history"]
        if log is not None and dist.get_rank() == 0:
            log(f"resumed from {meta['folder']} at step {start} ({consumed} samples)")
    if lr_schedule is not None and lr_schedule.min_lr is not None \
            and lr_schedule.decay_steps is None:
        try:
            lr_schedule = replace(lr_schedule, decay_steps=start + steps)  # decay over this run
        except ValueError as exc:  # e.g. warm-up longer than the run: one line, not a trace
            raise HetplanError(f"lr schedule over steps {start}..{start + steps}: {exc}") from None
    saved = {"model": plan.model, "plan": plan.to_dict(), "optimizer": optimizer,
             "lr_schedule": None if lr_schedule is None else lr_schedule.to_dict()}
    losses, times = [], []
    tokens = 0
    for step in range(start, start + steps):
        if lr_schedule is not None:
            for opt in runner_optimizers(runner):
                set_lr(opt, lr_schedule.lr_at(step))
        inputs, labels = next_batch(step, consumed)
        if inputs.shape[0] != plan.global_batch_size:
            raise HetplanError(f"batch has {inputs.shape[0]} rows, the plan's global batch is "
                               f"{plan.global_batch_size}")
        tokens = inputs.numel()
        t0 = time.perf_counter()
        losses.append(runner.train_step(inputs, labels))
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        consumed += inputs.shape[0]
        if log is not None and dist.get_rank() == 0:
            rate = "" if lr_schedule is None else f"  lr {lr_schedule.lr_at(step):.3g}"
            log(f"step {step + 1}/{start + steps}  loss {losses[-1]:.4f}{rate}  "
                f"{times[-1]:.3f} s  {tokens / times[-1]:,.0f} tokens/s")
        done = step + 1
        if save_checkpoint is not None and (done == start + steps or
                                            (save_every and done % save_every == 0)):
            folder = save_checkpoint_(runner, save_checkpoint, step=done, samples=consumed,
                                      meta={**saved, "history": [
                                          *history, [done - start, plan.global_batch_size]]})
            if log is not None and dist.get_rank() == 0:
                log(f"checkpoint: {folder}")
    timed = times[1:] or times
    rate = tokens * len(timed) / sum(timed) if timed else 0.0
    return TrainStats(plan_rank, dist.get_rank(), tuple(losses), tuple(times), tokens, rate,
                      tuple(notes))
