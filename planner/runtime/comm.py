"""Process groups and the stage-to-stage channel.

Stages exchange tensors with plain isend/recv, which works between TP groups of any sizes
(torch's PipelineStage assumes one rank per stage). Each receiver reads the messages from a
given peer in the order that peer sends them, buffering any it does not need yet: NCCL ignores
tags and matches point-to-point messages by order, so this keeps both backends correct.
Messages from a lower to a higher rank travel on one group and the reverse on another, so a
pending send never blocks a receive from the same peer (NCCL runs a pair's operations on one
stream per group).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import torch
import torch.distributed as dist

__all__ = ["Channel", "MessageId", "make_groups"]

MessageId = tuple[str, int, int]
"""("F", c, m): output of chunk c for micro-batch m; ("B", c, m): gradient of chunk c's input."""

_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64]
_HEADER = 10


def make_groups(tuples: Iterable[tuple[int, ...]], to_torch: dict[int, int],
                me: int) -> dict[tuple[int, ...], dist.ProcessGroup]:
    """One process group per distinct rank tuple (plan ranks) with two or more members.

    Every rank must call this with the same tuples: `new_group` is collective over the world.
    Returns the groups `me` belongs to.
    """
    out = {}
    for t in sorted(set(tuples)):
        if len(t) > 1:
            group = dist.new_group(sorted(to_torch[r] for r in t))
            if me in t:
                out[t] = group
    return out


class Channel:
    """Point-to-point messages between this rank's chunks and its neighbours' chunks."""

    def __init__(self, rank: int, to_torch: dict[int, int], device: torch.device,
                 inbound: dict[int, list[MessageId]]) -> None:
        """`inbound[src]` lists the messages src sends this rank, in src's send order."""
        self.rank = rank
        self.to_torch = to_torch
        self.device = device
        self.order = inbound
        self.inbound: dict[int, deque[MessageId]] = {}
        self.buffer: dict[tuple[int, MessageId], torch.Tensor] = {}
        self.pending: list[tuple[dist.Work, torch.Tensor]] = []
        world = sorted(to_torch.values())
        # Created by every rank in the same order (collective).
        self.up = dist.new_group(world)
        self.down = dist.new_group(world)

    def _group(self, src: int, dst: int) -> dist.ProcessGroup:
        return self.up if self.to_torch[src] < self.to_torch[dst] else self.down

    def send(self, msg: MessageId, tensor: torch.Tensor, dst: int) -> None:
        if dst == self.rank:
            self.buffer[(dst, msg)] = tensor.detach().clone()
            return
        data = tensor.detach().contiguous()
        header = torch.zeros(_HEADER, dtype=torch.int64)
        header[0] = _DTYPES.index(data.dtype)
        header[1] = data.dim()
        header[2:2 + data.dim()] = torch.tensor(data.shape, dtype=torch.int64)
        group = self._group(self.rank, dst)
        peer = self.to_torch[dst]
        for t in (header.to(self.device), data):
            self.pending.append((dist.isend(t, dst=peer, group=group), t))

    def recv(self, msg: MessageId, src: int) -> torch.Tensor:
        if src == self.rank:
            return self.buffer.pop((src, msg))
        while (src, msg) not in self.buffer:
            queue = self.inbound.get(src)
            if not queue:
                raise RuntimeError(f"rank {self.rank} waits for {msg} from rank {src}, "
                                   "which the schedule never sends (runtime bug)")
            nxt = queue.popleft()
            self.buffer[(src, nxt)] = self._recv_one(src)
        return self.buffer.pop((src, msg))

    def _recv_one(self, src: int) -> torch.Tensor:
        group = self._group(src, self.rank)
        peer = self.to_torch[src]
        header = torch.zeros(_HEADER, dtype=torch.int64, device=self.device)
        dist.recv(header, src=peer, group=group)
        header = header.cpu()
        shape = [int(x) for x in header[2:2 + int(header[1])]]
        data = torch.empty(shape, dtype=_DTYPES[int(header[0])], device=self.device)
        dist.recv(data, src=peer, group=group)
        return data

    def start_step(self) -> None:
        self.inbound = {src: deque(order) for src, order in self.order.items()}

    def finish_step(self) -> None:
        """Wait for this step's sends; every expected message must have been consumed."""
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
        if self.buffer:
            raise RuntimeError(f"rank {self.rank}: unread messages {sorted(self.buffer)[:3]}")
