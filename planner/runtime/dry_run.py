"""`hetplan dryrun`: a plan's exact structure, on this machine's CPU, against a reference.

The model keeps the plan's depth (every layer range, stage, TP degree, schedule, micro-batch
count and recompute setting stays) at a tiny width: hidden, heads, vocabulary and sequence
shrink to sizes every TP degree in the plan divides (head dim 8, at least 2 heads; the
sequence too, for sequence parallelism).
Micro-batches shrink to one sequence. Its host memory is estimated before any worker
starts (`dry_memory`); a run that would not fit is refused with the numbers.
Plans with more than `max_ranks` ranks keep one pipeline of each distinct shape (DP shrinks)
or, when one pipeline alone is too large, are refused.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any

from planner.errors import HetplanError, InfeasibleError
from planner.graph.embedded import graph_of, is_module_model, load_factory
from planner.graph.layers import LayerGraph
from planner.graph.spec import ModelSpec
from planner.runtime.dry_memory import available_gib, dryrun_memory, fp32_graph
from planner.schema import Plan

__all__ = ["DryrunResult", "dryrun", "shrink_plan", "tiny_spec"]

HEAD_DIM = 8
VOCAB = 128
SEQ_LEN = 16
TOLERANCE = 1e-5


@dataclass(frozen=True)
class DryrunResult:
    ok: bool
    max_grad_diff: float
    max_loss_diff: float
    losses: tuple[float, ...]
    reference_losses: tuple[float, ...]
    ranks: int
    params_checked: int
    """Distinct parameters compared each step (all of the model's, or the check failed)."""
    wall_s: float
    """Wall-clock time of the run: differs run to run, so `to_dict` leaves it out unless
    asked (`hetplan dryrun --json --timing`)."""
    model: dict[str, int]
    notes: tuple[str, ...] = field(default_factory=tuple)
    first_step: int = 0
    """Steps done before this run (a resumed checkpoint's step); losses are of the next ones."""
    max_param_diff: float = 0.0
    """Worst weight difference after the last step (reported, not judged: Adam can turn a
    rounding-level gradient difference near zero into a step of ±lr)."""

    def to_dict(self, *, timing: bool = False) -> dict[str, Any]:
        """The result as JSON: the same plan and flags give the same dict, except `wall_s`,
        present only with `timing`."""
        out = {"ok": self.ok, "max_grad_diff": self.max_grad_diff,
               "max_param_diff": self.max_param_diff, "loss": self.losses[-1],
               "reference_loss": self.reference_losses[-1],
               "max_loss_diff": self.max_loss_diff, "losses": list(self.losses),
               "reference_losses": list(self.reference_losses), "ranks": self.ranks,
               "params_checked": self.params_checked, "tolerance": TOLERANCE}
        if timing:
            out["wall_s"] = round(self.wall_s, 3)
        return out | {"model": self.model, "notes": list(self.notes),
                      "first_step": self.first_step}


def tiny_spec(model: dict[str, Any], plan: Plan) -> ModelSpec:
    """The plan's model at the plan's depth and a width every TP degree in it divides."""
    spec = ModelSpec.from_dict(model, where="plan.model")
    # At least two heads, so attention still mixes heads; every TP degree divides them.
    base = math.lcm(2, *(st.tp for pipe in plan.pipelines for st in pipe.stages))
    gqa = spec.num_kv_heads < spec.num_attention_heads
    heads = 2 * base if gqa else base
    hidden = heads * HEAD_DIM
    chunks = _cp_chunks(plan)
    seq_len = max(SEQ_LEN, 8 * base)
    seq_len += -seq_len % chunks
    return spec.replace(hidden_size=hidden, num_attention_heads=heads,
                        num_kv_heads=base if gqa else heads,
                        ffn_hidden_size=(4 if spec.architecture == "gpt" else 3) * hidden,
                        vocab_size=VOCAB, seq_len=seq_len,
                        name=f"{spec.name}-dryrun")


def _cp_chunks(plan: Plan) -> int:
    """What the sequence length must divide by: context parallelism cuts each sequence into
    2·cp equal chunks, and sequence parallelism then slices a GPU's seq/cp tokens over its TP
    ranks (plan_check.py)."""
    return math.lcm(*(2 * plan.cp(p) * (st.tp if plan.sequence_parallel else 1)
                      if plan.cp(p) > 1 else 1
                      for p, pipe in enumerate(plan.pipelines) for st in pipe.stages))


def _shape(pipe: Any) -> tuple[Any, ...]:
    return tuple((tuple(st.layers), st.tp, st.recompute) for st in pipe.stages)


def shrink_plan(plan: Plan, max_ranks: int = 16) -> tuple[Plan, list[str]]:
    """The plan with one-sequence micro-batches, its ranks renumbered 0..n-1 on one CPU node,
    and (when it has more than max_ranks ranks) one pipeline of each distinct shape."""
    notes: list[str] = []
    keep = list(range(len(plan.pipelines)))
    ep_cap = 0  # 0: every stage keeps its ep
    block = math.lcm(*(st.ep or 1 for pipe in plan.pipelines for st in pipe.stages),
                     *(plan.cp(p) for p in range(len(plan.pipelines))))
    if len(plan.ranks) > max_ranks and block > 1:
        # Expert- and context-parallel pipelines run in lockstep: keep the first whole block.
        used = len({r for pipe in plan.pipelines[:block] for st in pipe.stages for r in st.ranks})
        cp_any = any(plan.cp(p) > 1 for p in range(len(plan.pipelines)))
        while used > max_ranks and not cp_any and block > 2:
            # An expert block too large to fork: run a smaller ep (a divisor, so it still
            # divides the experts) and still check the all-to-all and the expert placement.
            smaller = max((e for e in range(2, block) if block % e == 0), default=None)
            if smaller is None:
                break  # a prime ep: nothing smaller still splits the experts
            notes.append(f"expert parallelism shrinks from ep {block} to ep {smaller} "
                         f"(a block of {used} ranks is over --max-ranks {max_ranks})")
            block = ep_cap = smaller
            used = len({r for pipe in plan.pipelines[:block] for st in pipe.stages
                        for r in st.ranks})
        if used > max_ranks:
            raise HetplanError(f"the first expert/context-parallel block (pipelines "
                               f"0..{block - 1}) "
                               f"uses {used} ranks; dryrun runs at most {max_ranks} processes "
                               "(raise --max-ranks if this machine has the cores and memory)")
        keep = list(range(block))
        notes.append(f"the plan has {len(plan.ranks)} ranks; dryrun keeps pipelines 0..{block - 1}"
                     f" (one expert/context-parallel block, {used} ranks)")
    elif len(plan.ranks) > max_ranks:
        sizes = [len({r for st in pipe.stages for r in st.ranks}) for pipe in plan.pipelines]
        if sizes[0] > max_ranks:
            raise HetplanError(f"pipeline 0 alone uses {sizes[0]} ranks; dryrun runs at most "
                               f"{max_ranks} processes on this machine (raise --max-ranks if "
                               "it has the cores and memory)")
        seen: set[tuple[Any, ...]] = set()
        keep, used = [], 0
        for i, pipe in enumerate(plan.pipelines):
            if _shape(pipe) not in seen and used + sizes[i] <= max_ranks:
                seen.add(_shape(pipe))
                keep.append(i)
                used += sizes[i]
        notes.append(f"the plan has {len(plan.ranks)} ranks; dryrun keeps pipelines {keep} "
                     f"(one per distinct shape that fits: DP {len(plan.pipelines)} -> "
                     f"{len(keep)}, {used} ranks)")
    pipes = [plan.pipelines[i] for i in keep]
    old = sorted({r for pipe in pipes for st in pipe.stages for r in st.ranks})
    new = {r: i for i, r in enumerate(old)}
    data = plan.to_dict()
    data["pipelines"] = [
        {"microbatches": p.microbatches,
         "stages": [{**st.model_dump(mode="json"), "ranks": [new[r] for r in st.ranks],
                     **({"ep": math.gcd(st.ep or 1, ep_cap)} if ep_cap else {})}
                    for st in p.stages]}
        for p in pipes]
    if pipes[0].shard_fraction is not None:
        # Uneven ZeRO shards: the kept pipelines split the state in the same proportions.
        kept = sum(p.shard_fraction or 0.0 for p in pipes)
        for row, p in zip(data["pipelines"], pipes, strict=True):
            row["shard_fraction"] = (p.shard_fraction or 0.0) / kept
        if len(pipes) == 1:
            data["pipelines"][0].pop("shard_fraction")
    data["ranks"] = [{"rank": i, "node": "cpu", "local_rank": i} for i in range(len(old))]
    data["micro_batch_size"] = 1
    # A cp-block's pipelines share their samples (schema.py): each block counts once.
    data["global_batch_size"] = sum(p.microbatches for i, p in enumerate(pipes)
                                    if i % (p.stages[0].cp or 1) == 0)
    data.pop("predicted", None)
    if plan.micro_batch_size != 1:
        notes.append(f"micro-batches shrink from {plan.micro_batch_size} sequences to 1")
    return Plan.from_dict(data, where="dryrun plan"), notes


def dryrun(plan: Plan, *, steps: int = 3, max_ranks: int = 16,
           start_method: str = "fork", timeout_s: float = 120.0,
           memory_gib: float | None = None, save_checkpoint: str | None = None,
           resume: str | None = None) -> DryrunResult:
    """Run the shrunk plan on local gloo workers and compare with a one-process reference.

    `save_checkpoint`: save a checkpoint (`checkpoint.py`) after the last step. `resume`: a
    checkpoint of the same model, saved by any plan: the runner loads it and continues; the
    reference trains every earlier step itself, so the comparison is with an uninterrupted
    run. The checkpoint fixes the tiny width (every TP degree of this plan must divide it).

    Refused before any worker starts (InfeasibleError, with the numbers) when its memory
    estimate (`dry_memory`) exceeds `memory_gib` (default: the memory available now).
    WorkerError (one line naming the rank) when a worker raises, is killed, or no worker
    makes progress for `timeout_s`."""
    from planner.runtime.check import check_plans

    if plan.model is None:
        raise HetplanError("the plan carries no model spec; dryrun needs one")
    small, notes = shrink_plan(plan, max_ranks)
    meta = None
    if resume is not None:
        from planner.runtime.checkpoint import check_model, read_meta

        meta = read_meta(resume)
        check_model(meta, plan.model)
        if not meta.get("runs") and not is_module_model(plan.model):
            raise HetplanError(f"--resume {meta['folder']}: saved by a training run at the "
                               "model's full size; dryrun runs a tiny width, so it resumes "
                               "only checkpoints that dryrun saved")
    factory, graph, info = _model_for(plan, small, meta)
    ran_spec = info.pop("spec", None)
    need = dryrun_memory(small, graph)
    limit = memory_gib if memory_gib is not None else available_gib()
    if limit is not None:
        if need.total_gib > limit:
            raise InfeasibleError(
                f"dryrun needs about {need.total_gib:.1f} GiB of memory ({need.workers} workers "
                f"× {need.per_worker_bytes / 2**30:.2f} GiB) but {limit:.1f} GiB is available; "
                "lower --max-ranks (fewer pipelines) or free memory")
        # The free memory differs run to run; the note names only the inputs' figures (the
        # refusal above says how much was free).
        within = ("within the memory available" if memory_gib is None
                  else f"within --memory-gib {memory_gib:g}")
        notes.append(f"memory: about {need.total_gib:.1f} GiB for {need.workers} workers "
                     f"({within}); the reference runs "
                     f"{need.reference_chunk} sequence(s) at a time")
    if is_module_model(plan.model):
        notes.append("a plan made from your nn.Module: dryrun runs the module at its own size")
    opts: dict[str, Any] = {"seq_len": info["seq_len"], "vocab_size": info["vocab_size"],
                            "reference_chunk": need.reference_chunk, "resume": meta}
    if meta is not None:
        notes.append(f"resumed from {meta['folder']} at step {meta['step']}; the reference "
                     f"trained steps 1..{meta['step']} itself")
    if save_checkpoint is not None:
        history = [*(meta or {}).get("history", []), [steps, small.global_batch_size]]
        opts["save"] = save_checkpoint
        opts["save_meta"] = {"model": plan.model, "runs": ran_spec,
                             "plan": plan.to_dict(), "optimizer": "adamw",
                             "lr_schedule": None, "history": history}
    start = time.perf_counter()
    (res,) = check_plans([(small, factory, opts)], steps=steps, start_method=start_method,
                         timeout_s=timeout_s)
    wall = time.perf_counter() - start
    return DryrunResult(
        ok=(res.max_grad_diff <= TOLERANCE and res.max_loss_diff <= TOLERANCE
            and res.num_params_checked == res.num_reference_params),
        max_grad_diff=res.max_grad_diff, max_loss_diff=res.max_loss_diff,
        losses=tuple(res.loss), reference_losses=tuple(res.reference_loss),
        ranks=len(small.ranks), params_checked=res.num_params_checked, wall_s=wall,
        model=info, notes=tuple(notes), first_step=0 if meta is None else int(meta["step"]),
        max_param_diff=res.max_param_diff)


def _model_for(plan: Plan, small: Plan,
               meta: dict[str, Any] | None = None) -> tuple[Any, LayerGraph, dict[str, Any]]:
    """(factory, graph for the memory estimate, what runs) for the shrunk plan: our models
    at the tiny width (a checkpoint's, when resuming from one), a user's module (a module
    plan) through its factory at its own size."""
    from planner.models import build_model

    if is_module_model(plan.model):
        graph, _ = graph_of(plan.model)
        factory = load_factory(plan.model)
        vocab = graph.layers[0].vocab_size
        if vocab <= 0:
            raise HetplanError("the module's embedding has no token table (nn.Embedding), so "
                               "dryrun cannot draw token batches for it")
        return factory, graph, {"num_layers": len(graph.layers) - 2,
                                "hidden_size": graph.layers[1].matmul_dim,
                                "vocab_size": vocab, "seq_len": graph.seq_len}
    spec = tiny_spec(plan.model, small)
    if meta is not None and meta.get("runs"):
        spec = _checkpoint_spec(meta, small)
    return (functools.partial(build_model, spec, device="cpu"), fp32_graph(spec),
            {"num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
             "num_attention_heads": spec.num_attention_heads,
             "num_kv_heads": spec.num_kv_heads, "vocab_size": spec.vocab_size,
             "seq_len": spec.seq_len, "spec": spec.model_dump(mode="json")})


def _checkpoint_spec(meta: dict[str, Any], small: Plan) -> ModelSpec:
    """The tiny model a dryrun checkpoint was saved at, if every TP degree here splits it."""
    spec = ModelSpec.from_dict(meta["runs"], where=f"{meta['folder']}: runs")
    for tp in sorted({st.tp for pipe in small.pipelines for st in pipe.stages}):
        if spec.num_kv_heads % tp or spec.ffn_hidden_size % tp or spec.seq_len % tp:
            raise HetplanError(f"--resume {meta['folder']}: the checkpoint's dryrun model has "
                               f"{spec.num_kv_heads} KV heads; TP {tp} of this plan does not "
                               "split it. Save from a plan whose TP degrees include this one")
    chunks = _cp_chunks(small)
    if spec.seq_len % chunks:
        raise HetplanError(f"--resume {meta['folder']}: the checkpoint's dryrun sequence of "
                           f"{spec.seq_len} tokens does not split into the {chunks} chunks of "
                           "this plan's context parallelism")
    return spec
