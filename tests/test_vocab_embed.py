"""The vocab-parallel token table (planner/runtime/vocab_embed.py) against a one-process
`nn.Embedding` with the same weights: the lookup whole on every TP rank, and the gradient
arriving at the weight as this rank's rows alone (a Shard(0) DTensor of vocab / TP rows), the
rows of the whole table's gradient. One launch of 2 gloo ranks."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from planner.runtime.local import init_world, run_local

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
        y = m(ids)
        (y * grad_out).sum().backward()
        ref_y = ref(ids)
        (ref_y * grad_out).sum().backward()
        rows = slice(rank * VOCAB // world, (rank + 1) * VOCAB // world)
        out[str(pad)] = {
            "arrived": arrived,
            "out_diff": float((y - ref_y).abs().max()),
            "grad_diff": float((m.weight.grad.to_local() - ref.weight.grad[rows]).abs().max()),
            "pad_grad": float(ref.weight.grad[PAD].abs().max()),
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
        assert res[str(PAD)]["pad_grad"] == 0.0  # the padding row got no gradient here either
        assert res["max_norm_split"] is False
