"""Communication costs: alpha-beta links and the collectives that run over them.

Every function answers in seconds for a message of `nbytes` over `n` peers on a `Link`
whose bandwidth is what ONE participant can push in one direction. Formulas are the
textbook ones (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 2005; NCCL's bus-bandwidth definitions in nccl-tests
doc/PERFORMANCE.md): a ring all-reduce moves 2(n-1)/n of the buffer through every
participant in 2(n-1) steps, an all-gather or reduce-scatter (n-1)/n in n-1 steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "Link",
    "allgather_s",
    "alltoall_s",
    "allreduce_s",
    "p2p_s",
    "reduce_scatter_s",
    "ring_allreduce_s",
    "tree_allreduce_s",
]


@dataclass(frozen=True, slots=True)
class Link:
    """One link level as a participant sees it: achievable bandwidth and per-message latency."""

    gb_per_s: float
    """Unidirectional bandwidth one participant achieves, GB/s (10^9 B/s)."""
    latency_s: float
    """Per-message start-up cost (alpha), seconds."""

    def __post_init__(self) -> None:
        if not self.gb_per_s > 0:
            raise ValueError(f"link bandwidth must be > 0 GB/s, got {self.gb_per_s}")
        if self.latency_s < 0:
            raise ValueError(f"link latency must be >= 0 s, got {self.latency_s}")

    @property
    def bytes_per_s(self) -> float:
        return self.gb_per_s * 1e9

    def slower(self, other: Link) -> Link:
        """The link a message crossing both ends sees: the slower bandwidth, the larger latency."""
        return Link(min(self.gb_per_s, other.gb_per_s), max(self.latency_s, other.latency_s))


def p2p_s(nbytes: float, link: Link) -> float:
    """One point-to-point message: alpha + bytes / bandwidth."""
    if nbytes <= 0:
        return 0.0
    return link.latency_s + nbytes / link.bytes_per_s


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce (reduce-scatter then all-gather): 2(n-1)·alpha + 2(n-1)/n · B / bw."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * nbytes / link.bytes_per_s


def tree_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Pipelined (double) binary tree all-reduce: reduce up then broadcast down.

    Pipelining makes the bandwidth term B/bw per direction (2·B/bw in all), independent of n;
    the latency term grows with the depth: 2·ceil(log2 n)·alpha.
    """
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * link.latency_s + 2 * nbytes / link.bytes_per_s


def allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """The faster of ring and tree, as NCCL picks per message size."""
    return min(ring_allreduce_s(nbytes, n, link), tree_allreduce_s(nbytes, n, link))


def allgather_s(nbytes: float, n: int, link: Link) -> float:
    """Ring all-gather of a `nbytes` result (each peer contributes nbytes/n)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) * link.latency_s + (n - 1) / n * nbytes / link.bytes_per_s


def reduce_scatter_s(nbytes: float, n: int, link: Link) -> float:
    """Ring reduce-scatter of a `nbytes` input (each peer keeps nbytes/n of the sum)."""
    return allgather_s(nbytes, n, link)


def alltoall_s(nbytes: float, n: int, link: Link) -> float:
    """Pairwise all-to-all of the `nbytes` each peer holds: it keeps 1/n and sends (n-1)/n,
    one message to each other peer: (n-1)·alpha + (n-1)/n · B / bw (Thakur et al. §3.5)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) * link.latency_s + (n - 1) / n * nbytes / link.bytes_per_s
