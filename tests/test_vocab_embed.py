"""The vocab-parallel token table (planner/runtime/vocab_embed.py) against a one-process
`nn.Embedding` with the same weights: the lookup whole on every TP rank, and the gradient
arriving at the weight as this rank's rows alone (a Shard(0) DTensor of vocab / TP rows), the
rows of the whole table's gradient. One launch of 2 gloo ranks. And `estimate`'s price for what
the embedding keeps for backward, which is whole on every TP rank."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from cost_models.profiles import ProfileSet
from planner.costing.stage_cost import stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from planner.runtime.local import init_world, run_local
from tests.test_cost_fixtures import gpu

VOCAB, HIDDEN, PAD = 12, 5, 7


def _table(padding_idx: int | None) -> nn.Embedding:
    torch.manual_seed(0)
    return nn.Embedding(VOCAB, HIDDEN, padding_idx=padding_idx)


def _worker(rank: int, world: int, store_dir: str) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    from planner.runtime.vocab_embed import split_embedding

    torch.set_num_threads(1)
    init_world(store_dir, "vocab_embed", rank, world)
    mesh = init_device_mesh("cpu", (world,))
    ids = torch.tensor([[0, 5, 6, 11, PAD, 6], [3, 3, 9, 1, 0, 11]])  # rows of both ranks
    grad_out = torch.randn(*ids.shape, HIDDEN, generator=torch.Generator().manual_seed(1))
    out: dict[str, Any] = {}
    for pad in (None, PAD):
        ref, m = _table(pad), _table(pad)
        assert split_embedding(m, mesh)
        arrived: list[tuple[str, tuple[int, ...]]] = []
        m.weight.register_hook(lambda g, seen=arrived: seen.append(
            (str(tuple(g.placements)), tuple(g.to_local().shape))))
        kept: dict[int, int] = {}  # storage → bytes of what the lookup saves for backward

        def pack(t: torch.Tensor, kept: dict[int, int] = kept) -> torch.Tensor:
            local = t.to_local() if isinstance(t, DTensor) else t
            kept[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = m(ids)
        weight = m.weight.to_local().untyped_storage().data_ptr()
        (y * grad_out).sum().backward()
        ref_y = ref(ids)
        (ref_y * grad_out).sum().backward()
        rows = slice(rank * VOCAB // world, (rank + 1) * VOCAB // world)
        out[str(pad)] = {
            "arrived": arrived,
            "out_diff": float((y - ref_y).abs().max()),
            "grad_diff": float((m.weight.grad.to_local() - ref.weight.grad[rows]).abs().max()),
            "pad_grad": float(ref.weight.grad[PAD].abs().max()),
            "saved_bytes": sum(b for k, b in kept.items() if k != weight),
        }
    # Tables whose lookup reads rows this rank does not own stay as they are.
    out["max_norm_split"] = split_embedding(nn.Embedding(VOCAB, HIDDEN, max_norm=1.0), mesh)
    return out


def test_lookup_is_whole_and_gradient_arrives_as_the_rows() -> None:
    for res in run_local(_worker, 2):
        for pad in ("None", str(PAD)):
            r = res[pad]
            # Backward hands the weight a Shard(0) gradient of vocab / TP rows, once.
            assert r["arrived"] == [("(Shard(dim=0),)", (VOCAB // 2, HIDDEN))], r
            assert r["out_diff"] <= 1e-6 and r["grad_diff"] <= 1e-6, r
            # Kept for backward: the whole int64 ids (shifted to the rank's rows) and their
            # out-of-range mask, 8 + 1 B per token on every TP rank.
            assert r["saved_bytes"] == 9 * 12, r
        assert res[str(PAD)]["pad_grad"] == 0.0  # the padding row got no gradient here either
        assert res["max_norm_split"] is False


@pytest.mark.parametrize("sp", [False, True])
def test_estimate_prices_the_embeddings_ids_whole_on_every_tp_rank(sp: bool) -> None:
    # tiny-llama's embedding keeps its int64 token ids (8 B per token, closed form) and
    # tiny GPT's its position ids too; both whole on every TP rank at any TP, SP or not
    # (above: the split lookup keeps the ids plus a 1 B mask). Before: ÷ TP, as if split.
    for name, ids in (("tiny-llama", 1), ("tiny", 2)):
        spec = load_model_spec(name)
        graph = extract(spec)
        for tp in (1, 2, 4):
            cost = stage_cost(graph, 0, 1, gpu(), tp, 3, "none", sequence_parallel=sp,
                              precision=spec.training.precision, profiles=ProfileSet())
            assert cost.activation_bytes_per_microbatch == 3 * ids * 8 * spec.seq_len
