"""torchtitan's per-op selective checkpointing: the closed form of what a block keeps
(cost_models/sac_activations.py) against a one-process run of a Llama block under the same
policy, and the estimate pricing a torchtitan plan's blocks at that closed form (the
per-layer pricing itself: tests/test_sac_cost.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

import planner.costing.validation.large_runs as lr
from cost_models.memory import GIB
from cost_models.profiles import ProfileSet
from cost_models.sac_activations import layer_sac_saved_bytes, op_sac_saved_bytes
from planner.costing.estimate import estimate
from planner.costing.framework import TORCHTITAN
from planner.costing.megatron import megatron_plan
from planner.models.chain import Block

# torchtitan's `_save_list` (parallelize_llama.py), with the CPU flash kernel standing in for
# the CUDA one so the run below needs no GPU.
_SAVE = {torch.ops.aten.mm.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy(meta: dict[str, int]):  # noqa: ANN202 (torch's policy callable)
    def policy(ctx, func, *args, **kwargs):  # noqa: ANN001, ANN202
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in _SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def _kept_bytes(block: torch.nn.Module, x: torch.Tensor) -> tuple[int, list[str]]:
    """Bytes the selective checkpoint's cache holds after the forward (each storage once)
    plus the block input the checkpoint holds, and the ops whose outputs were cached."""
    modes = []

    def context_fn():  # noqa: ANN202
        pair = create_selective_checkpoint_contexts(_policy(defaultdict(int)))
        modes.append(pair[0])
        return pair

    out = checkpoint(block, x, use_reentrant=False, context_fn=context_fn)
    storages: dict[int, int] = {}
    ops = []
    for func, entries in modes[0].storage.items():
        # A list per op, or (recent torch) a dict by call index holding a sentinel for the
        # recomputed calls.
        for entry in entries.values() if isinstance(entries, dict) else entries:
            leaves = entry if isinstance(entry, (tuple, list)) else (entry,)
            tensors = [t for t in (getattr(x, "val", x) for x in leaves)
                       if isinstance(t, torch.Tensor)]
            if tensors:
                ops.append(str(func))
            for t in tensors:
                s = t.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
    out.sum().backward()  # the cache is consumed by a real backward
    return sum(storages.values()) + x.numel() * x.element_size(), ops


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (8, 2)])
def test_closed_form_matches_a_checkpointed_block(heads: int, kv_heads: int) -> None:
    """hetplan's runtime Llama block (wq, wk, wv, flash SDPA, wo, w1, w3, w2: torchtitan's mm
    order) under torchtitan's policy keeps exactly the closed form's tensors."""
    torch.manual_seed(0)
    h, ffn, s, b = 64, 176, 32, 2
    block = Block(architecture="llama", hidden_size=h, num_heads=heads, num_kv_heads=kv_heads,
                  ffn_hidden_size=ffn, norm_eps=1e-5, rope_theta=10000.0, num_layers=2)
    x = torch.randn(b, s, h, requires_grad=True)
    kept, ops = _kept_bytes(block, x)
    assert ops.count("aten.mm.default") == 4  # wq, wv, w1, w2 of the seven
    kv = h // heads * kv_heads
    assert kept == b * op_sac_saved_bytes(s, h, ffn, kv, heads, dtype_bytes=4)


def test_llama3_8b_units() -> None:
    """4 + kv/h + ffn/h s·h units plus the log-sum-exp: 7.75 for Llama 3 8B, against the
    graph's ~20.5 for the whole eager block."""
    s, h = 8192, 4096
    units = (op_sac_saved_bytes(s, h, 14336, 1024, 32) - s * 32 * 4) / (s * h * 2)
    assert units == 7.75
    assert layer_sac_saved_bytes(1.0, 21.0) == 11.0
    assert layer_sac_saved_bytes(1.0, 21.0, every=3) == pytest.approx(43 / 3)
    with pytest.raises(ValueError):
        layer_sac_saved_bytes(1.0, 21.0, every=0)


def test_torchtitan_plan_prices_blocks_at_the_closed_form() -> None:
    """Llama 3.1 8B on 8 GPUs at local batch 2 (torchtitan's H100 table 1): the estimate's
    activations are 32 blocks at the closed form plus the embedding's and head's own saved
    bytes, two sequences each (was 90.3 GiB with the whole eager block kept)."""
    g = lr._graph("Llama3.1-8B", 8192, "bf16")
    cluster = lr._cluster(lr._H100_96, 8, 3200.0)
    plan = megatron_plan(g, cluster, tp=1, pp=1, dp=8, micro_batch=2, global_batch=16,
                         recompute="selective", sequence_parallel=False, zero1=True, zero=3)
    est = estimate(g, cluster, plan, profiles=ProfileSet(), precision="bf16",
                   framework=TORCHTITAN)
    blocks = sum(1 for x in g.layers if x.kind == "block")
    rest = sum(x.saved_bytes("selective") for x in g.layers if x.kind != "block")
    want = 2 * (blocks * op_sac_saved_bytes(8192, 4096, 14336, 1024, 32) + rest) / GIB
    assert est.stages[0].memory.activations_gib == pytest.approx(want, rel=1e-9)
    assert est.feasible  # the run ran on 95 GiB GPUs
