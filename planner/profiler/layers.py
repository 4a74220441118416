"""Measure a model's embedding, one transformer block and its head on this machine's device.

The rows become a profile file (cost_models/profiles.py format) that overrides the analytic
compute model for that GPU type: forward, backward (activation and weight gradients) and the
optimizer step of each layer kind, at each requested micro-batch size, TP 1. Every block of
our models has the same shapes, so one block stands for all (as in the extractor). TP > 1
needs a TP group of GPUs; the cost model scales TP-1 profiles to other degrees with its
physics (planner/costing/layer_cost.py).

The layers run the way hetplan's runtime runs them: fp32 master weights, the forward under
autocast at the training precision, AdamW for the update, SDPA attention. Each element gets a
real input (the previous element's output), so the block sees the hidden states it would in
training and the head computes the loss.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from cost_models.gpu import GpuSpec
from cost_models.profiles import PROFILE_COLUMNS, ProfileRow, ProfileSet
from planner.errors import HetplanError
from planner.graph.extract import extract
from planner.graph.layers import LayerGraph
from planner.graph.spec import ModelSpec
from planner.outfile import write_output
from planner.profiler.timing import device_sync, time_median_s

__all__ = ["KINDS", "LayerTiming", "profile_layers", "profile_rows", "write_profile_csv"]

KINDS = ("embedding", "block", "head")
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, slots=True)
class LayerTiming:
    """One layer kind at one micro-batch size: measured and analytic milliseconds."""

    kind: str
    micro_batch: int
    fwd_ms: float
    bwd_ms: float
    update_ms: float
    analytic_fwd_ms: float
    analytic_bwd_ms: float
    analytic_update_ms: float


def _with_precision(spec: ModelSpec, precision: str) -> ModelSpec:
    data = spec.to_dict()
    data["training"] = {**(data.get("training") or {}), "precision": precision}
    return ModelSpec.from_dict(data, where=f"model {spec.name}")


def _analytic(graph: LayerGraph, gpu: GpuSpec, precision: str, mb: int) -> dict[str, tuple]:
    from planner.costing.stage_cost import stage_cost

    out = {}
    for kind, index in zip(KINDS, (0, 1, len(graph.layers) - 1), strict=True):
        c = stage_cost(graph, index, index + 1, gpu, 1, mb, "none", precision=precision,
                       profiles=ProfileSet())
        out[kind] = (c.fwd_s * 1e3, c.bwd_s * 1e3, c.optimizer_step_s * 1e3)
    return out


def _elements(spec: ModelSpec, device: torch.device) -> dict[str, nn.Module]:
    from planner.models.build import build_element

    index = {"embedding": 0, "block": 1, "head": spec.num_layers + 1}
    return {k: build_element(spec, index[k], device=device, dtype=torch.float32, seed=0)
            for k in KINDS}


def profile_layers(spec: ModelSpec, *, device: torch.device, gpu: GpuSpec,
                   micro_batches: Sequence[int], precision: str | None = None,
                   warmup: int = 3, repeats: int = 10,
                   progress: Callable[[str], None] | None = None) -> list[LayerTiming]:
    """Time each layer kind of `spec` at each micro-batch size on `device` (TP 1)."""
    precision = precision or spec.training.precision
    if precision not in ("fp32", *_AUTOCAST):
        raise HetplanError(f"--precision {precision!r}: use bf16, fp16 or fp32")
    if not micro_batches or min(micro_batches) < 1:
        raise HetplanError(f"micro-batch sizes must be positive integers, got {micro_batches}")
    autocast_dtype = _AUTOCAST.get(precision)
    amp = ((lambda: torch.autocast(device.type, dtype=autocast_dtype)) if autocast_dtype
           else contextlib.nullcontext)
    sync = device_sync(device)
    elements = _elements(spec, device)
    optimizers = {k: torch.optim.AdamW(m.parameters(), lr=1e-5) for k, m in elements.items()}
    gen = torch.Generator(device="cpu").manual_seed(0)
    graph = extract(_with_precision(spec, precision))
    out: list[LayerTiming] = []
    for mb in sorted(set(micro_batches)):
        if progress:
            progress(f"micro-batch {mb}")
        tokens = torch.randint(0, spec.vocab_size, (mb, spec.seq_len), generator=gen).to(device)
        measured = _time_micro_batch(elements, optimizers, tokens, amp, sync, warmup, repeats)
        analytic = _analytic(graph, gpu, precision, mb)
        out.extend(LayerTiming(kind, mb, *(1e3 * t for t in measured[kind]), *analytic[kind])
                   for kind in KINDS)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _time_micro_batch(elements: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                      tokens: torch.Tensor, amp: Callable[[], contextlib.AbstractContextManager],
                      sync: Callable[[], None], warmup: int,
                      repeats: int) -> dict[str, tuple[float, float, float]]:
    """(forward, backward, update) seconds of each layer kind on one micro-batch."""
    from planner.models.chain import loss_fn

    with torch.no_grad(), amp():  # each element's real input: the previous one's output
        hidden = elements["embedding"](tokens)
        inputs = {"embedding": tokens, "block": hidden, "head": elements["block"](hidden)}

    def forward(kind: str, x: torch.Tensor) -> torch.Tensor:
        with amp():
            y = elements[kind](x)
            return loss_fn(y, tokens) if kind == "head" else y

    times = {}
    for kind in KINDS:
        x = inputs[kind]
        if x.is_floating_point():
            x = x.detach().requires_grad_()
        fwd = time_median_s(lambda _, k=kind, x=x: forward(k, x), warmup=warmup,
                            repeats=repeats, sync=sync)

        def run_forward(k: str = kind, x: torch.Tensor = x) -> tuple[torch.Tensor, ...]:
            for p in elements[k].parameters():
                p.grad = None
            y = forward(k, x)
            return y, torch.ones_like(y)  # the gradient arriving from the next layer

        bwd = time_median_s(lambda yg: yg[0].backward(yg[1]), setup=run_forward,
                            warmup=warmup, repeats=repeats, sync=sync)
        upd = time_median_s(lambda _, k=kind: optimizers[k].step(), warmup=warmup,
                            repeats=repeats, sync=sync)
        times[kind] = (fwd, bwd, upd)
    return times


def profile_rows(timings: Sequence[LayerTiming], spec: ModelSpec, gpu: GpuSpec,
                 precision: str, source: str) -> list[ProfileRow]:
    """The timings as profile-file rows for `gpu` (TP 1)."""
    return [ProfileRow(gpu=gpu.name, model=spec.name, hidden_size=spec.hidden_size,
                       seq_len=spec.seq_len, layer_kind=t.kind, micro_batch=t.micro_batch,
                       tp=1, precision=precision, fwd_ms=round(t.fwd_ms, 4),
                       bwd_ms=round(t.bwd_ms, 4), update_ms=round(t.update_ms, 4),
                       source=source)
            for t in timings]


def write_profile_csv(rows: Sequence[ProfileRow], path: str | Path) -> None:
    """Write rows in the profile-file format (header first), all or nothing."""
    fh = io.StringIO()
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(PROFILE_COLUMNS)
    for r in rows:
        w.writerow([r.gpu, r.model, r.hidden_size, r.seq_len, r.layer_kind, r.micro_batch,
                    r.tp, r.precision, r.fwd_ms, r.bwd_ms,
                    "" if r.update_ms is None else r.update_ms, r.source])
    write_output(path, fh.getvalue())
