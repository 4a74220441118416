"""One rank's share of a plan: its chunks, groups and channel, and the train step.

`Runner` is built on every rank after the default process group exists. A step runs the
rank's action list (see schedule.py), reduces gradients (grads.py) and steps the optimizer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from planner.errors import HetplanError
from planner.models.attention import Attention
from planner.models.chain import Embedding
from planner.models.moe import MoE
from planner.runtime.comm import Channel, MessageId, make_groups
from planner.runtime.context import ContextShard, cp_group, cp_groups, shard_sequence
from planner.runtime.experts import (
    ExpertParallel,
    drop_remote_experts,
    ep_group,
    ep_groups,
    ep_position,
    expert_rules,
)
from planner.runtime.fsdp import (
    fsdp_groups,
    fsdp_layout,
    fsdp_mesh,
    shard_chunk,
    shard_elements,
)
from planner.runtime.grads import clip_grad_norm, local_tensor, sync_gradients, sync_rules
from planner.runtime.scaler import LossScaler
from planner.runtime.schedule import Action, pipeline_actions
from planner.runtime.stage import (
    ChunkModule,
    ParamKey,
    ParamLayout,
    apply_recompute,
    apply_tp,
    apply_vocab_tp,
    chain_of,
    loss_of,
    parallel_loss_ok,
    param_keys,
)
from planner.runtime.topology import (
    Chunk,
    backward_peers,
    chunk,
    forward_peers,
    rank_view,
    tp_groups,
)
from planner.runtime.zero import ShardedOptimizer, holder_weights, zero_groups
from planner.schema import Plan

__all__ = ["Runner", "make_optimizer"]


def make_optimizer(params: list[torch.nn.Parameter], name: str, lr: float) -> torch.optim.Optimizer:
    """AdamW (weight decay 0.01) or plain SGD; the single-process reference uses the same."""
    if name in ("adam", "adamw"):
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=False)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise ValueError(f"optimizer {name!r}: use adamw or sgd")


def _actions(plan: Plan, pipeline: int) -> list[list[Action]]:
    pipe = plan.pipelines[pipeline]
    groups = len(pipe.stages) // plan.virtual_stages
    return pipeline_actions(plan.schedule, groups, plan.virtual_stages, pipe.microbatches)


def _sends(plan: Plan, rank: int) -> list[tuple[int, MessageId]]:
    """(destination, message) for everything `rank` sends in one step, in send order."""
    view = rank_view(plan, rank)
    last = view.num_chunks - 1
    out = []
    for kind, v, m in _actions(plan, view.pipeline)[view.group]:
        c = view.chunks[v].index
        here = view.chunks[v]
        if kind == "F" and c < last:
            nxt = chunk(plan, view.pipeline, c + 1)
            out += [(d, ("F", c, m)) for d in forward_peers(here, nxt, rank)]
        elif kind == "B" and c > 0:
            prev = chunk(plan, view.pipeline, c - 1)
            out += [(d, ("B", c, m)) for d in backward_peers(prev, here, rank)]
    return out


def _agree(value: Any, what: str) -> None:
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value)
    if any(v != everyone[0] for v in everyone):
        bad = next(i for i, v in enumerate(everyone) if v != everyone[0])
        raise HetplanError(f"torch ranks 0 and {bad} disagree on {what}")


def _expert_parallel(block: Any, plan: Plan, ch: Chunk, rank: int, to_torch: dict[int, int],
                     groups: dict[tuple[int, ...], dist.ProcessGroup]) -> None:
    """Route a mixture-of-experts block's experts over its stage's ep-group and drop the
    experts other members hold (experts.py); before the block is moved or split over TP."""
    members = ep_group(plan, ch.pipeline, ch.index, rank)
    if members is None:
        return
    index = ep_position(plan, ch.pipeline, ch.index, rank, to_torch)
    for m in [m for m in block.modules() if isinstance(m, MoE)]:
        if m.num_experts % len(members):
            raise HetplanError(f"pipelines.{ch.pipeline}.stages.{ch.index}: ep "
                               f"{len(members)} does not divide {m.num_experts} experts")
        m.dispatch = ExpertParallel(groups[members], len(members))
        if m.dispatch.index != index:  # the holders (expert_rules) assume this order
            raise HetplanError(f"pipelines.{ch.pipeline}.stages.{ch.index}: ep-group rank "
                               f"{m.dispatch.index}, expected {index}")
        drop_remote_experts(m, index, len(members))


def _context_parallel(elems: list[Any], plan: Plan, ch: Chunk, rank: int, index: int,
                      groups: dict[tuple[int, ...], dist.ProcessGroup],
                      shards: dict[tuple[int, ...], ContextShard]) -> None:
    """Give the chunk's attention and position embeddings the cp group's shard (context.py)."""
    members = cp_group(plan, ch.pipeline, ch.index, rank)
    if members is None:
        return
    if members not in shards:  # collective over the group: every member builds it in turn
        shards[members] = ContextShard(groups[members], len(members), index)
    for elem in elems:
        for m in elem.modules():
            if isinstance(m, Attention | Embedding):
                m.context = shards[members]


def _slice_stage(plan: Plan) -> int:
    """The ZeRO stage the slices of zero.py run: 2 (gradients reduce-scattered onto them) for
    a ZeRO-2/3 plan without expert- or context-parallel stages, whose gradients are reduced by
    rules of their own (experts.py, context.py) and stay on ZeRO-1 with a note."""
    plain = all((st.ep or 1) == 1 and (st.cp or 1) == 1 for pipe in plan.pipelines
                for st in pipe.stages)
    return min(plan.zero_stage, 2 if plain else 1)


def _zero_notes(plan: Plan, fsdp: dict, n_elements: int) -> list[str]:
    """Where the runtime's memory differs from the plan's ZeRO stage as priced (the same on
    every rank): elements off FSDP2 run on the slices of zero.py."""
    if plan.zero_stage < 2 or len(plan.pipelines) < 2:
        return []
    rest = n_elements - len(fsdp)
    if not rest:
        return []
    why = ("replicas of different shapes, uneven shard_fraction, tied weights, experts or "
           "context parallelism, which FSDP2's even shards cannot take")
    if _slice_stage(plan) == 2:
        whole = "; weights whole" if plan.zero_stage == 3 else ""
        return [f"zero {plan.zero_stage}: {rest} of {n_elements} chain elements run ZeRO-2 on "
                "the runtime's slices: gradients reduce-scattered once, after the step's last "
                "backward, so they are held whole through the backward (estimate prices "
                f"those stages at ZeRO-1's memory){whole} ({why})"]
    return [f"zero {plan.zero_stage}: {rest} of {n_elements} chain elements run at ZeRO-1 "
            f"(optimizer state sharded, gradients and weights whole): {why}"]


class Runner:
    """This rank's chunks of the model, ready to run train steps of the plan."""

    def __init__(self, plan: Plan, rank: int, to_torch: dict[int, int], model: Any,
                 device: torch.device, *, optimizer: str = "adamw", lr: float = 1e-3,
                 autocast: torch.dtype | None = None, layout: ParamLayout | None = None,
                 loss_scale: float | None = None, max_grad_norm: float | None = None) -> None:
        """`autocast`: compute dtype for forward (weights, gradients, optimizer stay fp32).
        `layout`: the whole model's parameter keys and ties when `model` is partly replaced
        (build_for_rank); by default read from `model`. `loss_scale`: initial scale of
        dynamic loss scaling (fp16); None for none. `max_grad_norm`: clip the global
        gradient norm to this (as torch.nn.utils.clip_grad_norm_ on the whole model)."""
        self.plan, self.rank, self.device = plan, rank, device
        self.optimizer_name = optimizer
        self.autocast = autocast
        self.scaler = LossScaler(loss_scale) if loss_scale else None
        self.max_grad_norm = max_grad_norm
        self.view = view = rank_view(plan, rank)
        chain = chain_of(model)
        self.loss_fn = loss_of(model)
        key_of, elements = layout or param_keys(chain)
        # Routed experts are held (and reduced) only where their ep position owns them.
        rules = {**sync_rules(plan, elements), **expert_rules(plan, elements, to_torch)}

        # Collective: every rank creates every group in one order. Ranks that disagree on the
        # list (a model factory that differs between ranks) would hang in new_group instead.
        wanted = (list(tp_groups(plan)) + [g for r in rules.values() for g in r.groups]
                  + ep_groups(plan) + cp_groups(plan))
        fsdp = fsdp_layout(plan, elements)
        if plan.zero_stage:
            wanted += zero_groups(rules) + fsdp_groups(fsdp)
        _agree(sorted(set(wanted)), "the process groups (same model on every rank?)")
        self.groups = make_groups(wanted, to_torch, rank)
        my_tp = view.chunks[0].ranks
        mine = sorted(e for ch in view.chunks for e in range(*ch.layers) if e in fsdp)
        dp_mesh = (fsdp_mesh(fsdp[mine[0]], rank, to_torch, self.groups, device, my_tp)
                   if mine else None)
        mesh = None
        if dp_mesh is not None and len(my_tp) > 1:
            mesh = dp_mesh["tp"]  # FSDP2 + TP: the TP DTensors live on the (dp, tp) mesh
        elif len(my_tp) > 1:
            from torch.distributed.device_mesh import DeviceMesh

            mesh = DeviceMesh.from_group(self.groups[my_tp], device.type)

        last = len(chain) - 1
        self.chunks: list[ChunkModule] = []
        self.notes: list[str] = []
        split_ties: dict[int, torch.nn.Parameter] = {}
        # Logits split over the vocabulary need the loss (and its backward) under torch's
        # loss_parallel; only our cross-entropy is known to run there.
        self.loss_parallel = False
        shard_logits = parallel_loss_ok(self.loss_fn)
        shards: dict[tuple[int, ...], ContextShard] = {}
        for ch in view.chunks:
            elems = chain[ch.layers[0]:ch.layers[1]]
            _context_parallel(elems, plan, ch, rank, view.cp_index, self.groups, shards)
            sp: set[int] = set()
            for i, (e, m) in enumerate(zip(range(*ch.layers), elems, strict=True)):
                if 0 < e < last:
                    _expert_parallel(m, plan, ch, rank, to_torch, self.groups)
                m.to(device)
                if e in (0, last) and mesh is not None:
                    split = apply_vocab_tp(m, "embedding" if e == 0 else "head", mesh,
                                           split_ties, shard_logits)
                    self.loss_parallel |= split and e == last and shard_logits
                if 0 < e < last:
                    if mesh is not None:
                        where = f"pipelines.{ch.pipeline}.stages.{ch.index} layer {e}"
                        if apply_tp(m, mesh, where, plan.sequence_parallel):
                            sp.add(i)
                        elif plan.sequence_parallel and not self.notes:
                            self.notes.append(f"sequence_parallel: block {e} lacks attn_norm/"
                                              "attn/mlp_norm/mlp; such blocks run without SP")
                    apply_recompute(m, ch.recompute)
            self.chunks.append(ChunkModule(elems, frozenset(sp), mesh))
        # FSDP2 after TP and recompute (torchtitan's order); one FSDP module per element.
        self.fsdp_chunks = [shard_elements([chain[e] for e in range(*ch.layers) if e in fsdp],
                                           dp_mesh, plan.zero_stage, autocast)
                            if dp_mesh is not None else [] for ch in view.chunks]
        # A chunk FSDP2 shards whole runs under one FSDP2 root (`shard_chunk`).
        self.roots = [shard_chunk(self.chunks[v], [chain[e] for e in range(*ch.layers)],
                                  dp_mesh, plan.zero_stage)
                      if dp_mesh is not None and self.fsdp_chunks[v]
                      and all(e in fsdp for e in range(*ch.layers)) else None
                      for v, ch in enumerate(view.chunks)]
        for v, root in enumerate(self.roots):
            if root is not None:
                self.fsdp_chunks[v].append(root)
        self.last_backward = {v: max(i for i, (k, u, _) in enumerate(
            _actions(plan, view.pipeline)[view.group]) if k == "B" and u == v)
            for v in range(len(view.chunks))}

        # Parameters are named after TP (which swaps in DTensor parameters, same names);
        # a tied weight held twice on this rank is one parameter under one key.
        local: dict[ParamKey, torch.nn.Parameter] = {}
        for ch in view.chunks:
            for e in range(*ch.layers):
                for name, p in chain[e].named_parameters():
                    local.setdefault(key_of[(e, name)], p)
        self.params = sorted(local.items(), key=lambda kp: kp[0])
        self.rules = rules
        self.to_torch = to_torch
        sharded = {id(p) for ms in self.fsdp_chunks for m in ms for p in m.parameters()}
        self.fsdp_keys = frozenset(k for k, p in self.params if id(p) in sharded)
        self.synced = [(k, p) for k, p in self.params if k not in self.fsdp_keys]
        # One optimizer (`self.optimizer`, as checkpoints and lr schedules expect): over the
        # ZeRO-1 master slices and the FSDP2 shards (DTensors over the dp mesh, each rank steps
        # its own), or over every parameter without ZeRO.
        own = ([p for k, p in self.params if k in self.fsdp_keys] if plan.zero_stage
               else [p for _, p in self.params])
        self.zero = (ShardedOptimizer(self.synced, rules, rank, to_torch, self.groups,
                                      lambda ps: make_optimizer(ps + own, optimizer, lr),
                                      holder_weights(plan))
                     if plan.zero_stage and self.synced else None)
        self.optimizer = (self.zero.optimizer if self.zero is not None
                          else make_optimizer(own, optimizer, lr))
        # A mesh torch's rank order cannot express leaves this rank's elements on ZeRO-1 too.
        self.notes += _zero_notes(plan, fsdp if dp_mesh is not None or not mine else {},
                                  len(chain))

        inbound: dict[int, list[MessageId]] = {}
        peers = {r for ch in view.chunks for c in (ch.index - 1, ch.index + 1)
                 if 0 <= c < view.num_chunks for r in chunk(plan, view.pipeline, c).ranks}
        for src in sorted(peers):
            order = [msg for dst, msg in _sends(plan, src) if dst == rank]
            if order:
                inbound[src] = order
        self.channel = Channel(rank, to_torch, device, inbound)
        self.actions = _actions(plan, view.pipeline)[view.group]

    def _chunk(self, c: int) -> Chunk:
        return chunk(self.plan, self.view.pipeline, c)

    def _forward(self, v: int, c: int, m: int, ins: tuple[torch.Tensor, ...],
                 labs: tuple[torch.Tensor, ...], last: int) -> tuple[torch.Tensor | None,
                                                                     torch.Tensor]:
        """Forward of local chunk v (global c) on micro-batch m: (input leaf or None, output
        or, on the last chunk, the scaled loss). Sends the output on."""
        here = self.view.chunks[v]
        if c == 0:
            x = None
            out = self._run(v, ins[m])
        else:
            src = forward_peers(self._chunk(c - 1), here, self.rank)[0]
            x = self.channel.recv(("F", c - 1, m), src).requires_grad_()
            out = self._run(v, x)
        if c == last:
            with self._loss_context():
                # A cp rank's loss is the mean over its 1/cp of the tokens: the cp ranks'
                # shares sum to the sequences' mean (context.py).
                return x, self.loss_fn(out, labs[m]) / (self.view.total_microbatches
                                                        * self.view.cp)
        for dst in forward_peers(here, self._chunk(c + 1), self.rank):
            self.channel.send(("F", c, m), out, dst)
        return x, out

    def _run(self, v: int, x: torch.Tensor) -> torch.Tensor:
        root = self.roots[v]
        return root(x) if root is not None else self.chunks[v](x)

    def _backward(self, v: int, c: int, m: int, last: int, x: torch.Tensor | None,
                  out: torch.Tensor) -> None:
        """Backward of local chunk v (global c) on micro-batch m; sends the input gradient."""
        here = self.view.chunks[v]
        if c == last:
            with self._loss_context():
                torch.autograd.backward(out * self.scaler.scale if self.scaler else out)
        else:
            src = backward_peers(here, self._chunk(c + 1), self.rank)[0]
            torch.autograd.backward(out, self.channel.recv(("B", c + 1, m), src))
        if x is not None:
            for dst in backward_peers(self._chunk(c - 1), here, self.rank):
                self.channel.send(("B", c, m), x.grad, dst)

    def _autocast(self, on: bool) -> contextlib.AbstractContextManager:
        """The step's autocast region (`on`), or autocast off inside it for a backward."""
        if self.autocast is None:
            return contextlib.nullcontext()
        if on:
            return torch.autocast(self.device.type, self.autocast)
        return torch.autocast(self.device.type, enabled=False)

    def _loss_context(self) -> contextlib.AbstractContextManager:
        if not self.loss_parallel:
            return contextlib.nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    def forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Run the schedule on this pipeline's slice of the global batch; returns the summed
        (already 1/total-scaled) loss of micro-batches this rank finished, 0 elsewhere."""
        view, mbs = self.view, self.plan.micro_batch_size
        lo = view.microbatch_offset * mbs
        inputs, labels = inputs[lo:lo + view.microbatches * mbs], labels[lo:lo + view.microbatches
                                                                          * mbs]
        if view.cp > 1:  # this pipeline's zig-zag chunks of every sequence (context.py)
            inputs = shard_sequence(inputs, view.cp, view.cp_index)
            labels = shard_sequence(labels, view.cp, view.cp_index)
        ins = inputs.to(self.device).split(mbs)
        labs = labels.to(self.device).split(mbs)
        last = view.num_chunks - 1
        saved: dict[tuple[int, int], tuple[torch.Tensor | None, torch.Tensor]] = {}
        loss_sum = torch.zeros((), device=self.device)
        self.channel.start_step()
        # One autocast region for the whole step: its cast cache keeps ONE 16-bit copy of each
        # fp32 weight for every micro-batch. A region per forward kept a copy per micro-batch
        # in flight (each GEMM saves its cast weight for the backward). Backwards run inside
        # with autocast off; the cache lives until the step's region ends.
        with self._autocast(True):
            for i, (kind, v, m) in enumerate(self.actions):
                here = view.chunks[v]
                c = here.index
                if kind == "B" and self.plan.zero_stage == 2:
                    # ZeRO-2: weights stay gathered until the chunk's last backward of the step.
                    for module in self.fsdp_chunks[v]:
                        module.set_reshard_after_backward(i == self.last_backward[v])
                if kind == "F":
                    x, out = self._forward(v, c, m, ins, labs, last)
                    if c == last:
                        loss_sum += local_tensor(out.detach())
                    saved[(v, m)] = (x, out)
                    continue
                with self._autocast(False):
                    self._backward(v, c, m, last, *saved.pop((v, m)))
        self.channel.finish_step()
        if not (view.chunks[-1].index == last and view.tp_index == 0):
            loss_sum.zero_()
        return loss_sum

    def train_step(self, inputs: torch.Tensor, labels: torch.Tensor,
                   before_update: Callable[[Runner], None] | None = None) -> float:
        """One iteration: schedule, gradient sync, optimizer step (skipped when fp16 loss
        scaling overflowed anywhere). Returns the global loss."""
        for _, p in self.params:  # under ZeRO-1 the optimizer holds slices, not these
            p.grad = None
        loss = self.forward_backward(inputs, labels)
        sliced = self.zero is not None and _slice_stage(self.plan) >= 2
        with torch.no_grad():
            if sliced:  # ZeRO-2 on the slices: reduce-scatter, keep this rank's slice
                self.zero.reduce_gradients(self.view.chunks[0].tp)
            else:
                sync_gradients(self.synced, self.rules, self.rank, self.view.chunks[0].tp,
                               self.groups)
        dist.all_reduce(loss)
        slices = tuple(m.grad for m in self.zero.masters) if sliced else ()
        if self.scaler is not None and not self.scaler.unscale_or_skip(
                [p.grad for _, p in self.params if p.grad is not None] + list(slices),
                self.device):
            return float(loss)
        if self.max_grad_norm is not None:
            clip_grad_norm(self.params, self.rules, self.rank, self.view.tp_index,
                           self.max_grad_norm, self.device, self.fsdp_keys, slices)
        if before_update is not None:
            before_update(self)
        if self.zero is not None:
            self.zero.step()  # steps self.optimizer (slices and FSDP2 shards together)
        else:
            self.optimizer.step()
        return float(loss)
