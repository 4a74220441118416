"""ZeRO-2 and -3 with torch's `fully_shard` (FSDP2) where the data-parallel shards are even.

A device group is *even* when every element it holds is held by the same set of device groups
(its replicas: the same stage of identical pipelines), all at one TP degree, so that each
parameter's TP shards line up over the replicas and FSDP2 can cut them evenly. Each chain
element of such a group is `fully_shard`-ed over a (dp, tp) mesh built from the plan's own
process groups (dp: the ranks at this TP index in every replica; tp: the TP group, whose
submesh the TP DTensors live on, as FSDP2 + TP requires):
- ZeRO-3: `reshard_after_forward=True` (weights gathered before each micro-batch's forward and
  again before its backward, gradients reduce-scattered after each backward): the traffic
  `cost_models.memory.dp_sync_bytes_per_param` prices for stage 3.
- ZeRO-2: weights stay gathered from the first forward to the chunk's last backward of the
  step (one all-gather per step), gradients are reduce-scattered after every backward (DeepSpeed
  stage 2 reduces each micro-step), so only a shard of them is kept.
Gradients are summed (force-sum, divide factor 1): the loss is already scaled by
1 / (all micro-batches), and gloo has no pre-multiplied sum.

Elements FSDP2 cannot take stay on the slices of `zero.py`, which run ZeRO-2 there (optimizer
state and, after the step's backward, gradients sharded; weights whole, so a ZeRO-3 plan runs
those elements as ZeRO-2 with a note): a weight tied across elements (one parameter in two
modules), expert-parallel stages, replicas of different shapes or TP degrees, and plans with
uneven `shard_fraction`s (a replica's share of the state follows its memory, Cephalo-style,
which FSDP2's even shards cannot express).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from planner.runtime.fsdp_layout import FsdpLayout, fsdp_layout, mesh_in_rank_order

__all__ = ["FsdpLayout", "fsdp_layout", "fsdp_mesh", "shard_chunk", "shard_elements"]

def _dp_group(reps: tuple[tuple[int, ...], ...], tp_index: int) -> tuple[int, ...]:
    return tuple(sorted(g[tp_index] for g in reps))


def fsdp_groups(layout: FsdpLayout) -> list[tuple[int, ...]]:
    """The data-parallel groups FSDP2 reduces over (all ranks list them: new_group is
    collective); they are the DP all-reduce groups of `grads.SyncRule` for these elements."""
    return sorted({_dp_group(reps, i) for reps in layout.values() for i in range(len(reps[0]))})


def fsdp_mesh(reps: tuple[tuple[int, ...], ...], rank: int, to_torch: dict[int, int],
              groups: dict[tuple[int, ...], dist.ProcessGroup], device: torch.device,
              tp_group: tuple[int, ...]) -> DeviceMesh | None:
    """The (dp, tp) mesh of this rank's replicas (dp only at TP 1), from the plan's groups;
    None when torch's rank order does not match the mesh (a plan numbering ranks out of node
    order): its group ranks would then disagree with the mesh coordinates."""
    if not mesh_in_rank_order(reps, to_torch):
        return None
    grid = [[to_torch[r] for r in g] for g in sorted(reps, key=lambda g: to_torch[g[0]])]
    tp_index = next(g.index(rank) for g in reps if rank in g)
    dp = groups[_dp_group(reps, tp_index)]
    if len(tp_group) == 1:
        return DeviceMesh.from_group(dp, device.type, mesh=torch.tensor([row[0] for row in grid]),
                                     mesh_dim_names=("dp",))
    return DeviceMesh.from_group([dp, groups[tp_group]], device.type, mesh=torch.tensor(grid),
                                 mesh_dim_names=("dp", "tp"))


def shard_elements(modules: Iterable[torch.nn.Module], mesh: DeviceMesh, zero: int,
                   param_dtype: torch.dtype | None = None) -> list:
    """`fully_shard` each module over the mesh's dp dimension; returns the FSDP modules, nested
    ones (a block's norms) first. `param_dtype`: the plan's 16-bit compute dtype, or None
    (fp32 plans): FSDP2 then gathers the weights of GEMM-bearing modules in it
    (`MixedPrecisionPolicy`, torchtitan's way) and reduces gradients in fp32. Autocast over
    gathered fp32 weights would instead keep a 16-bit cast of every gathered weight alive after
    the reshard (the GEMMs save it for the backward), undoing ZeRO-3's weight sharding. The
    norms and token tables are sharded on their own, in fp32, and block inputs are not cast,
    so the residual stream and the norms run in fp32 as on the runtime's other stages."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dp = mesh["dp"] if mesh.ndim > 1 else mesh
    # FSDP2 warns when a module returns a view (the embedding does) because an in-place op on
    # it would drop the pre-backward hook; the chain never changes an element's output in place.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    low = (MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32,
                                cast_forward_inputs=False)
           if param_dtype is not None else MixedPrecisionPolicy())
    out = []

    def shard(m: torch.nn.Module, policy: MixedPrecisionPolicy) -> None:
        fully_shard(m, mesh=dp, reshard_after_forward=zero >= 3, mp_policy=policy)
        m.set_gradient_divide_factor(1.0)
        m.set_force_sum_reduction_for_comms(True)
        out.append(m)

    for m in modules:
        if not any(True for _ in m.parameters()):
            continue
        if param_dtype is None:
            shard(m, low)
            continue
        if not any(isinstance(sub, torch.nn.Linear) or _has_3d_weight(sub)
                   for sub in m.modules()):
            shard(m, MixedPrecisionPolicy())  # a token table: a lookup, no GEMM
            continue
        for sub in m.modules():
            if sub is not m and isinstance(sub, _FP32_MODULES) and any(
                    True for _ in sub.parameters()):
                shard(sub, MixedPrecisionPolicy())
        shard(m, low)
    return out


_FP32_MODULES = (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.Embedding)
"""Modules whose weights stay fp32 under a 16-bit policy: autocast runs them in fp32 on the
runtime's unsharded stages, so FSDP2 stages keep the same numerics and saved-tensor sizes."""


def _has_3d_weight(m: torch.nn.Module) -> bool:
    """Stacked expert weights (batched GEMMs) held directly by a module."""
    return any(p.dim() >= 3 for p in m.parameters(recurse=False))


class _ChunkRoot(torch.nn.Module):
    """A chunk's chain elements under one module whose forward runs the chunk."""

    def __init__(self, run: Callable[[torch.Tensor], torch.Tensor],
                 elements: list[torch.nn.Module]) -> None:
        super().__init__()
        self.run = run
        self.elements = torch.nn.ModuleList(elements)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)


def shard_chunk(run: Callable[[torch.Tensor], torch.Tensor], elements: list[torch.nn.Module],
                mesh: DeviceMesh, zero: int) -> torch.nn.Module:
    """One FSDP2 root over a chunk whose every element `shard_elements` sharded (torchtitan
    wraps its whole model last): the elements then share the root's communication state, so
    a backward keeps one element's fp32 reduce-scatter input at a time (each element its own
    root kept every element's until the backward ended: 93 % of a tiny-llama stage's
    parameters in fp32, measured) and prefetches across elements. The root holds no
    parameters; its forward runs the chunk (`run`)."""
    from torch.distributed.fsdp import fully_shard

    dp = mesh["dp"] if mesh.ndim > 1 else mesh
    root = _ChunkRoot(run, elements)
    fully_shard(root, mesh=dp, reshard_after_forward=zero >= 3)
    root.set_gradient_divide_factor(1.0)
    root.set_force_sum_reduction_for_comms(True)
    return root
