"""What a plan means for one rank: its chunks, its pipeline peers, who else holds its layers.

Pure Python over the Plan (no torch), so the launcher and the tests can use it cheaply.
Ranks here are the plan's ranks; `torch_rank_map` translates them to the global ranks that
torchrun hands out (node by node, in the order the launch scripts number the nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import HetplanError
from planner.schema import Plan

__all__ = [
    "Chunk",
    "RankView",
    "backward_peers",
    "chunk",
    "element_holders",
    "forward_peers",
    "node_order",
    "rank_view",
    "tp_groups",
    "torch_rank_map",
]


@dataclass(frozen=True)
class Chunk:
    """One model chunk of one pipeline and the TP group that runs it."""

    pipeline: int
    index: int
    """Position in the pipeline's chunk list (0 .. S×V-1); chunk j runs on device group j % S."""
    layers: tuple[int, int]
    """Half-open range over the model chain (0 = embedding, L+1 = head)."""
    ranks: tuple[int, ...]
    recompute: str

    @property
    def tp(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class RankView:
    """Everything one rank needs to know about its place in the plan."""

    rank: int
    pipeline: int
    group: int
    """Device-group index s in 0 .. S-1 within the pipeline."""
    tp_index: int
    num_groups: int
    num_chunks: int
    chunks: tuple[Chunk, ...]
    """The chunks this rank runs, in order s, s+S, s+2S, ..."""
    microbatches: int
    microbatch_offset: int
    """Index of this pipeline's first micro-batch in the global batch (pipelines in plan order;
    the pipelines of a cp-block share theirs)."""
    total_microbatches: int
    """Micro-batches of the global batch (a cp-block's pipelines share theirs: counted once)."""
    cp: int = 1
    """Context-parallel degree of the pipeline (schema.py: its cp-block's size)."""
    cp_index: int = 0
    """This pipeline's place in its cp-block: its zig-zag chunks of every sequence."""


def chunk(plan: Plan, pipeline: int, index: int) -> Chunk:
    st = plan.pipelines[pipeline].stages[index]
    return Chunk(pipeline, index, tuple(st.layers), tuple(st.ranks), st.recompute)


def rank_view(plan: Plan, rank: int) -> RankView:
    if not 0 <= rank < len(plan.ranks):
        raise HetplanError(f"rank {rank} is not in the plan (ranks 0..{len(plan.ranks) - 1})")
    offset = 0
    total = sum(p.microbatches for i, p in enumerate(plan.pipelines) if i % plan.cp(i) == 0)
    for p_idx, pipe in enumerate(plan.pipelines):
        groups = len(pipe.stages) // plan.virtual_stages
        for s in range(groups):
            ranks = pipe.stages[s].ranks
            if rank in ranks:
                chunks = tuple(chunk(plan, p_idx, j) for j in range(s, len(pipe.stages), groups))
                return RankView(rank, p_idx, s, ranks.index(rank), groups, len(pipe.stages),
                                chunks, pipe.microbatches, offset, total, plan.cp(p_idx),
                                p_idx % plan.cp(p_idx))
        if p_idx % plan.cp(p_idx) == plan.cp(p_idx) - 1:  # a cp-block's samples count once
            offset += pipe.microbatches
    raise HetplanError(f"rank {rank} serves no stage of the plan")


def forward_peers(sender: Chunk, receiver: Chunk, rank: int) -> tuple[int, ...]:
    """Activation edge sender → receiver: the ranks `rank` exchanges with.

    Receiver TP rank j takes its input from sender TP rank j % tp_sender (TP stages hold the
    boundary activation replicated, so any sender rank has it). Called with a sender rank it
    returns the receivers it feeds; with a receiver rank, the one sender it reads.
    """
    if rank in receiver.ranks:
        return (sender.ranks[receiver.ranks.index(rank) % sender.tp],)
    i = sender.ranks.index(rank)
    return tuple(r for j, r in enumerate(receiver.ranks) if j % sender.tp == i)


def backward_peers(sender: Chunk, receiver: Chunk, rank: int) -> tuple[int, ...]:
    """Gradient edge for the activation sender → receiver, which flows receiver → sender.

    Sender TP rank i takes the input gradient from receiver TP rank i % tp_receiver.
    """
    if rank in sender.ranks:
        return (receiver.ranks[sender.ranks.index(rank) % receiver.tp],)
    j = receiver.ranks.index(rank)
    return tuple(r for i, r in enumerate(sender.ranks) if i % receiver.tp == j)


def element_holders(plan: Plan, element: int) -> tuple[tuple[int, ...], ...]:
    """The TP groups (rank tuples, sorted) that hold chain element `element`, over all pipelines."""
    found: set[tuple[int, ...]] = set()
    for pipe in plan.pipelines:
        for st in pipe.stages:
            if st.layers[0] <= element < st.layers[1]:
                found.add(tuple(st.ranks))
    return tuple(sorted(found))


def tp_groups(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """Every device group's ranks, sorted (the same list on every rank)."""
    return tuple(sorted({tuple(st.ranks) for pipe in plan.pipelines for st in pipe.stages}))


def node_order(plan: Plan) -> tuple[tuple[str, int], ...]:
    """(node, processes on it) in launch order: nodes sorted by their lowest plan rank."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for r in sorted(plan.ranks, key=lambda r: r.rank):
        first.setdefault(r.node, r.rank)
        count[r.node] = count.get(r.node, 0) + 1
    nodes = sorted(first, key=first.__getitem__)
    return tuple((n, count[n]) for n in nodes)


def torch_rank_map(plan: Plan) -> dict[int, int]:
    """plan rank → torchrun global rank.

    torchrun numbers ranks node by node: node_rank n's local rank l is global rank
    (processes on nodes 0..n-1) + l. A plan whose local ranks on each node are 0..k-1 maps
    onto that numbering one to one; the map is the identity when the plan already counts
    node by node.
    """
    base: dict[str, int] = {}
    size: dict[str, int] = {}
    total = 0
    for node, n_proc in node_order(plan):
        base[node], size[node] = total, n_proc
        total += n_proc
    out: dict[int, int] = {}
    for r in plan.ranks:
        n_proc = size[r.node]
        if r.local_rank >= n_proc:
            raise HetplanError(
                f"plan rank {r.rank} has local_rank {r.local_rank} on node {r.node}, which runs "
                f"{n_proc} processes; local ranks on a node must be 0..{n_proc - 1}")
        out[r.rank] = base[r.node] + r.local_rank
    return out
