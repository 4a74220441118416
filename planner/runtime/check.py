"""Run a plan on local gloo workers and compare every step with a single-process reference.

Each worker also trains the whole model in one process on the same global batch (the model is
tiny) and compares, before each optimizer update, the loss and every gradient it holds (TP
shards gathered to full tensors) with the reference's. The worst difference over all ranks
comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from planner.runtime.data import synthetic_batch
from planner.runtime.engine import Runner, make_optimizer
from planner.runtime.grads import full_tensor
from planner.runtime.local import init_world, run_local
from planner.runtime.stage import chain_of, loss_of, parallel_loss_ok
from planner.schema import Plan

__all__ = ["CheckResult", "check_plans"]

ModelFactory = Callable[[], Any]


@dataclass(frozen=True)
class CheckResult:
    """One plan's run against the reference, worst case over ranks and steps."""

    max_grad_diff: float
    loss: list[float]
    reference_loss: list[float]
    max_loss_diff: float
    num_params_checked: int
    """Distinct parameters compared (over all ranks, a tied weight once)."""
    num_reference_params: int
    max_param_diff: float = 0.0
    """Worst |weight difference| after the last optimizer step (held weights, TP and FSDP
    shards gathered)."""


def _reference_step(model: Any, opt: torch.optim.Optimizer, inputs: torch.Tensor,
                    labels: torch.Tensor, chunk: int | None = None) -> float:
    """Forward and backward of the whole batch, `chunk` rows at a time (gradients
    accumulate; each chunk's token-mean loss weighted by its share of the rows, which sums
    to the whole batch's token-mean), so the reference holds one chunk's activations."""
    opt.zero_grad(set_to_none=True)
    loss_fn = loss_of(model)
    rows = inputs.shape[0]
    if chunk is None or chunk >= rows or not parallel_loss_ok(loss_fn):
        chunk = rows  # a model's own loss need not be a mean over rows: one piece
    total = 0.0
    for start in range(0, rows, chunk):
        x = inputs[start:start + chunk]
        for m in chain_of(model):
            x = m(x)
        part = loss_fn(x, labels[start:start + chunk]) * (x.shape[0] / rows)
        part.backward()
        total += float(part.detach())
    return total


def _batch_source(opts: dict[str, Any]) -> Callable[[int, int, int], tuple[torch.Tensor,
                                                                           torch.Tensor]]:
    """(step, samples consumed before it, rows) -> the global batch: synthetic tokens seeded
    by the step, or the token file's next windows."""
    if opts.get("data") is not None:
        from planner.runtime.data_file import TokenData

        d = opts["data"]
        data = TokenData(d["path"], opts["seq_len"], dtype=d.get("dtype", "uint16"),
                         vocab_size=opts["vocab_size"], seed=d.get("seed", 0))
        return lambda step, consumed, rows: data.batch(consumed, rows)
    return lambda step, consumed, rows: synthetic_batch(step, rows, opts["seq_len"],
                                                        opts["vocab_size"])


def _worker(rank: int, world: int, store_dir: str, plan_dict: dict, factory: ModelFactory,
            opts: dict[str, Any], steps: int) -> dict[str, Any]:
    from planner.runtime.checkpoint import runner_optimizers
    from planner.runtime.lr_schedule import LrSchedule, set_lr

    plan = Plan.from_dict(plan_dict)
    init_world(store_dir, "plan", rank, world)
    lr, opt_name = opts.get("lr", 1e-4), opts.get("optimizer", "adamw")
    schedule = LrSchedule(**opts["lr_schedule"]) if opts.get("lr_schedule") else None
    runner = Runner(plan, rank, {r: r for r in range(world)}, factory(), torch.device("cpu"),
                    optimizer=opt_name, lr=lr, loss_scale=opts.get("loss_scale"),
                    max_grad_norm=opts.get("max_grad_norm"))
    ref = factory()
    ref_chain = chain_of(ref)
    ref_opt = make_optimizer(list(ref.parameters()), opt_name, lr)
    next_batch = _batch_source(opts)
    worst, worst_param, checked = 0.0, 0.0, set()

    def compare(r: Runner) -> None:
        nonlocal worst
        for (e, name), p in r.params:
            if p.grad is None:
                continue  # reduced to ZeRO-2 slices: compared below
            mine = full_tensor(p.grad)
            theirs = ref_chain[e].get_parameter(name).grad
            worst = max(worst, float((mine - theirs).abs().max()))
            checked.add((e, name))
        for i, s in enumerate(r.zero.slices if r.zero is not None else []):
            g = r.zero.masters[i].grad
            if r.zero.params[s.key].grad is not None or g is None:
                continue
            e, name = s.key
            theirs = r.zero.piece(i, ref_chain[e].get_parameter(name).grad)
            if g.numel():
                worst = max(worst, float((g - theirs).abs().max()))
            checked.add((e, name))

    def reference_loss(step: int, inputs: torch.Tensor, labels: torch.Tensor) -> float:
        loss = _reference_step(ref, ref_opt, inputs, labels, opts.get("reference_chunk"))
        if opts.get("max_grad_norm") is not None:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), opts["max_grad_norm"])
        return loss

    # A resumed run: the reference trains the steps before the checkpoint itself, uninterrupted
    # (with the batch sizes of the runs that made it), and the runner loads the checkpoint.
    resume = opts.get("resume")
    start, consumed = 0, 0
    for seg_steps, rows in (resume or {}).get("history", []):
        for _ in range(seg_steps):
            inputs, labels = next_batch(start, consumed, rows)
            if schedule is not None:
                set_lr(ref_opt, schedule.lr_at(start))
            reference_loss(start, inputs, labels)
            ref_opt.step()
            start, consumed = start + 1, consumed + rows
    if resume is not None:
        from planner.runtime.checkpoint import load_checkpoint

        load_checkpoint(runner, resume)
    losses, ref_losses = [], []
    for step in range(start, start + steps):
        inputs, labels = next_batch(step, consumed, plan.global_batch_size)
        consumed += plan.global_batch_size
        if schedule is not None:
            set_lr(ref_opt, schedule.lr_at(step))
            for opt in runner_optimizers(runner):
                set_lr(opt, schedule.lr_at(step))
        ref_losses.append(reference_loss(step, inputs, labels))
        losses.append(runner.train_step(inputs, labels, before_update=compare))
        ref_opt.step()
    with torch.no_grad():
        for (e, name), p in runner.params:
            theirs = ref_chain[e].get_parameter(name)
            worst_param = max(worst_param, float((full_tensor(p) - theirs).abs().max()))
    if opts.get("save") is not None:
        from planner.runtime.checkpoint import save_checkpoint

        save_checkpoint(runner, opts["save"], step=start + steps, samples=consumed,
                        meta=opts["save_meta"])
    diff = torch.tensor([worst, worst_param])
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, sorted(checked))
    covered = {tuple(k) for keys in everyone for k in keys}
    return {"max_grad_diff": float(diff[0]), "max_param_diff": float(diff[1]), "loss": losses,
            "reference_loss": ref_losses,
            "params": len(covered), "reference_params": len(list(ref.parameters()))}


def check_plans(jobs: list[tuple[Plan, ModelFactory, dict[str, Any]]], steps: int = 2,
                start_method: str = "fork", timeout_s: float = 120.0) -> list[CheckResult]:
    """Run each (plan, model factory, options) job on local workers; options carry seq_len,
    vocab_size and optionally lr and optimizer (default AdamW, lr 1e-4: a large step lets
    Adam turn rounding-level gradient differences near zero into ±lr weight differences) and
    loss_scale (the fp16 loss-scaling path, exercised in fp32: a power-of-two scale is exact)
    and max_grad_norm (global-norm clipping; the reference uses clip_grad_norm_) and
    reference_chunk (rows per reference forward/backward; default the whole batch) and
    lr_schedule (LrSchedule fields), data (a token file: path, dtype, seed), resume (a
    checkpoint's metadata: the reference first trains its history, the runner loads it),
    save (a folder: save a checkpoint after the last step, with save_meta in its JSON).

    `timeout_s`: stop (WorkerError) when no worker makes progress for that long.
    One launch per plan: re-initialising the default group inside one process and building a
    DTensor mesh again over the same ranks hung (torch 2.13, gloo), and forked workers start
    in milliseconds, so fresh processes cost little.
    """
    results = []
    for plan, factory, opts in jobs:
        r0 = run_local(_worker, len(plan.ranks), plan.to_dict(), factory, opts, steps,
                       start_method=start_method, timeout_s=timeout_s)[0]
        results.append(CheckResult(
            max_grad_diff=r0["max_grad_diff"], loss=r0["loss"], reference_loss=r0["reference_loss"],
            max_loss_diff=max(abs(a - b) for a, b in zip(r0["loss"], r0["reference_loss"],
                                                         strict=True)),
            num_params_checked=r0["params"], num_reference_params=r0["reference_params"],
            max_param_diff=r0["max_param_diff"]))
    return results
