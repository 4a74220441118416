"""ZeRO stage 1 by whole tensors: each parameter's optimizer state lives on one rank of its
data-parallel group, which updates it and broadcasts the new values to the others.

Only parameters reduced shard-to-shard (every holder pipeline at the same TP degree, see
grads.py) are partitioned: their DP peers hold identical local tensors. Parameters shared
between pipelines at different TP degrees keep their full state on every holder. Tensors
go to the least-loaded member of the group (by element count, in key order), so every member
computes the same assignment without talking.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from planner.runtime.grads import SyncRule, local_tensor
from planner.runtime.stage import ParamKey

__all__ = ["ZeroPartition", "broadcast_updates", "partition"]


@dataclass(frozen=True)
class ZeroPartition:
    owned: tuple[ParamKey, ...]
    """Keys whose optimizer state this rank keeps (and updates)."""
    broadcasts: tuple[tuple[tuple[int, ...], int, tuple[ParamKey, ...]], ...]
    """(group, owner, keys) in one global order: after the step, owner sends those tensors."""


def partition(params: list[tuple[ParamKey, torch.nn.Parameter]], rules: dict[ParamKey, SyncRule],
              rank: int) -> ZeroPartition:
    by_group: dict[tuple[int, ...], list[tuple[ParamKey, int]]] = {}
    owned: list[ParamKey] = []
    for key, p in params:
        rule = rules[key]
        group = rule.group_for(rank)
        if not rule.uniform or len(group) == 1:
            owned.append(key)
        else:
            by_group.setdefault(group, []).append((key, local_tensor(p).numel()))
    broadcasts = []
    for group in sorted(by_group):
        load = dict.fromkeys(group, 0)
        keys_of: dict[int, list[ParamKey]] = {r: [] for r in group}
        for key, numel in sorted(by_group[group]):
            owner = min(group, key=lambda r: (load[r], r))
            load[owner] += numel
            keys_of[owner].append(key)
        for owner in group:
            if keys_of[owner]:
                broadcasts.append((group, owner, tuple(keys_of[owner])))
                if owner == rank:
                    owned.extend(keys_of[owner])
    return ZeroPartition(tuple(sorted(owned)), tuple(broadcasts))


@torch.no_grad()
def broadcast_updates(part: ZeroPartition, params: dict[ParamKey, torch.nn.Parameter],
                      groups: dict[tuple[int, ...], dist.ProcessGroup],
                      to_torch: dict[int, int]) -> None:
    for group, owner, keys in part.broadcasts:
        tensors = [local_tensor(params[k]) for k in keys]
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.broadcast(flat, src=to_torch[owner], group=groups[group])
        offset = 0
        for t in tensors:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
