"""Measure a module's forward and backward, region by region, on the meta device.

A *region* is one element of the chain (embedding, a block, the head). The caller's
hooks switch `Recorder.region` at element boundaries in the forward; the backward
switches when autograd reaches the node that produced an element's output.

Conventions (decided here and tested in tests/test_graph_extract.py):
- FLOPs come from `torch.utils.flop_counter.FlopCounterMode` (2 per multiply-add).
  On meta, SDPA decomposes to two batched matmuls over the full s×s score matrix, so
  attention is counted NON-causal, and its backward as 2× its forward (Korthikanti eq. 7,
  PaLM/torchtitan MFU convention). `fwd_attention_flops` keeps that part apart so a
  cost model can halve it for causal kernels.
- Activation-gradient vs weight-gradient FLOPs: the backward runs twice; once asking
  autograd only for the activation gradient at the first element's output (autograd
  then skips every weight-gradient matmul), once for all parameters. wgrad = all − dgrad.
- Saved-for-backward bytes: `saved_tensors_hooks`, each storage counted once, weights
  excluded. Inside `F.scaled_dot_product_attention` the meta decomposition would save the
  s×s probabilities, which no fused GPU kernel does: there we count what a flash /
  memory-efficient kernel keeps (q, k, v and the fp32 log-sum-exp; its output is the
  o-projection's saved input). The `math` CoreAttention is counted op by op.
- Inside `F.rms_norm` the meta (and CPU) composite saves the fp32 upcast and the normalised
  input for the weight's gradient; CUDA runs `_fused_rms_norm`, whose backward keeps the
  input and a per-row fp32 rstd (its autograd node saves input, weight and rstd), so we count
  those. Its memory traffic stays the composite's.
- Selective recompute drops what the attention core saves and keeps its inputs q, k, v
  (Korthikanti §4); full recompute keeps only the element's input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, flop_registry

__all__ = ["Recorder", "RegionStats", "measure_regions"]

# Ops that only reinterpret metadata: no HBM traffic.
_METADATA_OPS = {"aten._unsafe_view", "aten.detach", "aten.lift_fresh", "aten.alias"}
_GATHER_OPS = {"aten.embedding", "aten.index_select"}


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass(slots=True)
class RegionStats:
    """What one chain element did in one forward + backward (batch of 1 sequence)."""

    fwd_matmul_flops: float = 0.0
    fwd_attention_flops: float = 0.0
    fwd_memory_bytes: float = 0.0
    fwd_expert_flops: float = 0.0
    """The part of `fwd_matmul_flops` run inside routed experts (mixture of experts)."""
    bwd_act_flops: float = 0.0
    bwd_flops: float = 0.0
    saved_bytes: float = 0.0
    core_saved_bytes: float = 0.0
    core_input_bytes: float = 0.0
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    params: int = 0
    shared_params: int = 0
    """Parameters this region uses that are counted in an earlier region (a tied weight)."""
    shared_with: int = -1
    """The region that counts them (-1: none)."""
    gemm_params: int = 0
    """Parameters this region uses as a GEMM operand (its own or shared): the weights an
    autocast region casts to 16 bits (linear / matmul weights; not norms, not an embedding
    table it only looks rows up in)."""
    ops: list[dict[str, Any]] = field(default_factory=list)
    """Forward ops in order: {op, flops, bytes, kind, inputs: [(region, op_index, bytes)]}."""
    output_op: int | None = None

    @property
    def fwd_flops(self) -> float:
        """Every forward FLOP here is a matmul's (FlopCounterMode counts nothing else)."""
        return self.fwd_matmul_flops


class Recorder:
    """Shared state of one measurement: the current region and per-region stats."""

    def __init__(self, n_regions: int, params: Sequence[nn.Parameter]) -> None:
        self.stats = [RegionStats() for _ in range(n_regions)]
        self.region = 0
        self.boundaries: dict[int, torch.Tensor] = {}
        self.core_depth = 0
        self.core_flash = False
        self.norm_depth = 0
        self.expert_depth = 0
        self._param_keys = {_key(p): p for p in params}
        self._param_region: dict[int, int] = {}
        self._param_users: dict[int, set[int]] = {}
        self._gemm_users: dict[int, set[int]] = {}  # parameter -> regions using it in a GEMM
        self._saved: set[int] = set()
        self._producer: dict[int, tuple[int, int]] = {}
        self._keep: list[torch.Tensor] = []

    # --- forward boundaries (called from module hooks) -------------------------------
    def enter(self, region: int, inputs: Sequence[Any] = ()) -> None:
        self.region = region
        tensors = [t for t in tree_flatten(list(inputs))[0] if isinstance(t, torch.Tensor)]
        if tensors:
            self.stats[region].input_bytes = _tensor_bytes(tensors[0])

    def leave(self, region: int, output: Any) -> None:
        out = next(t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor))
        self.boundaries[region] = out
        self.stats[region].output_bytes = _tensor_bytes(out)
        self.stats[region].output_op = self._producer.get(id(out), (None, None))[1]

    # --- attention core ---------------------------------------------------------------
    def enter_core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, flash: bool) -> None:
        self.core_depth += 1
        if self.core_depth > 1:
            return
        self.core_flash = flash
        st = self.stats[self.region]
        st.core_input_bytes += sum(_tensor_bytes(t) for t in (q, k, v))
        if flash:
            b, a, s = q.shape[0], q.shape[1], q.shape[2]
            lse = b * a * s * 4  # fp32 log-sum-exp per query row
            kept = sum(_nbytes(t) for t in (q, k, v) if _key(t) not in self._saved)
            self._saved.update(_key(t) for t in (q, k, v))
            st.saved_bytes += kept + lse
            st.core_saved_bytes += kept + lse
            out_bytes = _tensor_bytes(q) * v.shape[-1] // q.shape[-1]
            st.fwd_memory_bytes += sum(_tensor_bytes(t) for t in (q, k, v)) + out_bytes + lse

    def exit_core(self) -> None:
        self.core_depth -= 1

    # --- fused RMSNorm ------------------------------------------------------------------
    def enter_norm(self, x: torch.Tensor, normalized_dims: int) -> None:
        """What CUDA's fused RMSNorm keeps for its backward: `x` and one fp32 rstd per row."""
        self.norm_depth += 1
        if self.norm_depth > 1:
            return
        key = _key(x)
        kept = 0 if key in self._param_keys or key in self._saved else _nbytes(x)
        self._saved.add(key)
        rows = x.numel() // max(1, x.shape[-normalized_dims:].numel())
        self.stats[self.region].saved_bytes += kept + 4 * rows

    def exit_norm(self) -> None:
        self.norm_depth -= 1

    # --- saved tensors ------------------------------------------------------------------
    def pack(self, t: torch.Tensor) -> torch.Tensor:
        if (self.core_depth and self.core_flash) or self.norm_depth:
            return t
        key = _key(t)
        if key in self._param_keys or key in self._saved:
            return t
        self._saved.add(key)
        st = self.stats[self.region]
        st.saved_bytes += _nbytes(t)
        if self.core_depth:
            st.core_saved_bytes += _nbytes(t)
        return t

    # --- ops (forward) ------------------------------------------------------------------
    def record_op(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        st = self.stats[self.region]
        packet = func._overloadpacket
        name = str(packet)
        flops = 0
        if packet in flop_registry:
            flops = flop_registry[packet](*args, **kwargs, out_val=out)
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        for t in ins:
            pkey = _key(t)
            if pkey in self._param_keys:
                self._param_region.setdefault(pkey, self.region)
                self._param_users.setdefault(pkey, set()).add(self.region)
        if flops:
            kind = "attention" if self.core_depth else "matmul"
            if kind == "matmul":  # its parameter operands (a weight's transpose shares storage)
                for t in ins:
                    if _key(t) in self._param_keys:
                        self._gemm_users.setdefault(_key(t), set()).add(self.region)
        elif func.is_view or name in _METADATA_OPS:
            kind = "view"
        else:
            kind = "memory"
        moved = 0
        if kind == "memory" and not (self.core_depth and self.core_flash):
            if name in _GATHER_OPS:  # reads only the rows it gathers, not the whole table
                moved = 2 * sum(_tensor_bytes(t) for t in outs) + _tensor_bytes(ins[-1])
            else:
                moved = sum(_tensor_bytes(t) for t in ins) + sum(_tensor_bytes(t) for t in outs)
            st.fwd_memory_bytes += moved
        if kind == "matmul":
            st.fwd_matmul_flops += flops
            if self.expert_depth:
                st.fwd_expert_flops += flops
        elif kind == "attention":
            st.fwd_matmul_flops += flops
            st.fwd_attention_flops += flops
        index = len(st.ops)
        edges = []
        for t in ins:
            src = self._producer.get(id(t))
            if src is not None:
                edges.append((src[0], src[1], _tensor_bytes(t)))
        st.ops.append({"op": name, "flops": flops, "bytes": moved, "kind": kind, "inputs": edges})
        for t in outs:
            self._producer[id(t)] = (self.region, index)
            self._keep.append(t)  # keeps id() unique for the whole trace

    def assign_params(self, params: Sequence[nn.Parameter]) -> None:
        """Each parameter counts in the region that first used it (unused: region 0); a later
        region that uses it too (a tied weight) records it as shared with that region."""
        for p in params:
            key = _key(p)
            region = self._param_region.get(key, 0)
            self.stats[region].params += p.numel()
            for user in self._gemm_users.get(key, ()):
                self.stats[user].gemm_params += p.numel()
            for other in sorted(self._param_users.get(key, ())):
                if other != region:
                    self.stats[other].shared_params += p.numel()
                    self.stats[other].shared_with = region


class _OpTrace(TorchDispatchMode):
    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.rec.record_op(func, args, kwargs, out)
        return out


class _SdpaWatch(TorchFunctionMode):
    """Marks every F.scaled_dot_product_attention call as a fused attention core, and every
    RMSNorm as CUDA's fused one."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func in (F.rms_norm, torch.rms_norm):
            x = args[0] if args else kwargs["input"]
            shape = args[1] if len(args) > 1 else kwargs["normalized_shape"]
            self.rec.enter_norm(x, len(shape))
            try:
                return func(*args, **kwargs)
            finally:
                self.rec.exit_norm()
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q = args[0] if args else kwargs["query"]
        k = args[1] if len(args) > 1 else kwargs["key"]
        v = args[2] if len(args) > 2 else kwargs["value"]
        self.rec.enter_core(q, k, v, flash=True)
        try:
            return func(*args, **kwargs)
        finally:
            self.rec.exit_core()


def _switch_on_backward(
    rec: Recorder, counter: FlopCounterMode, target: str
) -> tuple[list[Any], Callable[[], None]]:
    """Pre-hooks on each boundary's grad_fn: attribute backward FLOPs to regions.

    The node that produced region r's output runs after every node of region r+1
    (autograd runs a node once all its consumers are done), so entering it starts r.
    """
    state = {"last": 0}

    def flush() -> None:
        total = counter.get_total_flops()
        st = rec.stats[rec.region]
        setattr(st, target, getattr(st, target) + total - state["last"])
        state["last"] = total

    handles = []
    for region, tensor in sorted(rec.boundaries.items()):
        if tensor.grad_fn is None:
            continue

        def hook(grad_outputs: Any, region: int = region) -> None:
            flush()
            rec.region = region

        handles.append(tensor.grad_fn.register_prehook(hook))
    return handles, flush


def measure_regions(
    forward: Callable[[], torch.Tensor],
    install_hooks: Callable[[Recorder], list[Any]],
    n_regions: int,
    params: Sequence[nn.Parameter],
    core_modules: Sequence[nn.Module] = (),
    expert_modules: Sequence[nn.Module] = (),
) -> list[RegionStats]:
    """Run `forward` (which returns a tensor) once forward and twice backward, measuring.

    `install_hooks(rec)` registers the module hooks that call `rec.enter` / `rec.leave`
    and returns their handles. `core_modules` are op-by-op attention cores (their saved
    tensors count as the core for selective recompute); `expert_modules` are routed experts
    (their forward FLOPs are also counted in `fwd_expert_flops`).
    """
    rec = Recorder(n_regions, params)
    handles = install_hooks(rec)
    for core in core_modules:
        handles.append(core.register_forward_pre_hook(
            lambda m, args: rec.enter_core(*args[:3], flash=False)))
        handles.append(core.register_forward_hook(lambda m, args, out: rec.exit_core()))
    for expert in expert_modules:
        handles.append(expert.register_forward_pre_hook(
            lambda m, args: setattr(rec, "expert_depth", rec.expert_depth + 1)))
        handles.append(expert.register_forward_hook(
            lambda m, args, out: setattr(rec, "expert_depth", rec.expert_depth - 1)))
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t),
            FlopCounterMode(display=False) as counter,
            _SdpaWatch(rec),
            _OpTrace(rec),
        ):
            out = forward()
        # Forward FLOPs per region come from the op trace, which uses FlopCounterMode's
        # own formulas; the counter's total checks nothing was missed.
        traced = sum(st.fwd_matmul_flops for st in rec.stats)
        if traced != counter.get_total_flops():
            raise RuntimeError(f"op trace counted {traced} FLOPs, FlopCounterMode "
                               f"{counter.get_total_flops()}")
        first = rec.boundaries.get(0)
        grad_out = torch.ones_like(out)
        if first is not None and first.requires_grad:
            _backward(rec, out, grad_out, [first], "bwd_act_flops", n_regions)
        trainable = [p for p in params if p.requires_grad]
        _backward(rec, out, grad_out, trainable, "bwd_flops", n_regions)
        rec.assign_params(params)
    finally:
        for handle in handles:
            handle.remove()
    return rec.stats


def _backward(rec: Recorder, out: torch.Tensor, grad_out: torch.Tensor,
              inputs: list[torch.Tensor], target: str, n_regions: int) -> None:
    rec.region = n_regions - 1
    with FlopCounterMode(display=False) as counter:
        hooks, flush = _switch_on_backward(rec, counter, target)
        try:
            torch.autograd.grad(out, inputs, grad_out, retain_graph=True, allow_unused=True)
            flush()
        finally:
            for h in hooks:
                h.remove()
