"""`Framework.sac_policy` priced per layer from each block's own dimensions
(planner/costing/sac_cost.py): the torchtitan record as `estimate`, the search's tables and
`hetplan validate` use it, against the closed form of cost_models/sac_activations.py (which
tests/test_sac_activations.py checks against a checkpointed block's cache)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cost_models.memory import GIB
from cost_models.profiles import ProfileSet
from cost_models.sac_activations import op_sac_saved_bytes
from planner.cluster.load import load_cluster
from planner.costing.framework import TORCHTITAN, Framework
from planner.costing.sac_cost import sac_block_costs
from planner.costing.stage_cost import layer_cost_table
from planner.costing.validation.common import graph_for

ROOT = Path(__file__).resolve().parents[1]
# Llama 3 8B's published config (HF config.json): hidden 4096, 32 heads, 8 KV heads (KV width
# 1024), intermediate 14336, 32 layers.
H, HEADS, KV, FFN, LAYERS = 4096, 32, 1024, 14336, 32


def _block_closed_form(seq: int) -> float:
    return op_sac_saved_bytes(seq, H, FFN, KV, HEADS, dtype_bytes=2)


def test_llama_block_priced_at_the_closed_form_from_its_own_dims() -> None:
    """Every Llama 3 8B block, any sequence length: kept bytes from the closed form; re-run
    share wk + wo + w3 over the block's forward GEMMs (its attention core non-causal,
    4·s·h per token): 19456 / (53248 + 2·s/h·4096) of h-wide units, 27.9 % at 8192."""
    for seq in (2048, 8192):
        g = graph_for("llama3-8b", seq_len=seq, precision="bf16")
        blocks = [x for x in g.layers if x.kind == "block"]
        assert len(blocks) == LAYERS
        for layer in blocks:
            gemm, mem, kept = sac_block_costs(layer, g, TORCHTITAN.sac_policy)
            assert kept == _block_closed_form(seq)
            assert gemm == pytest.approx((KV + H + FFN) / (H + 2 * KV + H + 3 * FFN + 2 * seq))
            assert mem == 1.0
    assert sac_block_costs(blocks[0], g, "") is None


def _per_layer(prefix: tuple[float, ...]) -> list[float]:
    return [b - a for a, b in zip(prefix, prefix[1:], strict=False)]


def test_search_tables_and_estimate_share_the_per_layer_price() -> None:
    """`layer_cost_table` (what `planner/search/tables.py` and `estimate` both read) with the
    plain torchtitan record, micro-batch 2: each block keeps twice the closed form; the
    embedding and head keep what they keep under Megatron's selective."""
    g = graph_for("llama3-8b", seq_len=4096, precision="bf16")
    gpu = load_cluster("dgx-a100").groups[0].gpu
    kw = {"precision": "bf16", "profiles": ProfileSet()}
    tab = layer_cost_table(g, gpu, 1, 2, "selective", framework=TORCHTITAN, **kw)
    meg = layer_cost_table(g, gpu, 1, 2, "selective",
                           framework=dataclasses.replace(TORCHTITAN, sac_policy=""), **kw)
    ours, megatron = _per_layer(tab.activation_bytes), _per_layer(meg.activation_bytes)
    assert len(ours) == len(g.layers)
    for layer, got, theirs in zip(g.layers, ours, megatron, strict=True):
        want = 2 * _block_closed_form(4096) if layer.kind == "block" else theirs
        assert got == pytest.approx(want, rel=1e-12)
        if layer.kind == "block":  # Megatron's selective keeps far more of a Llama block
            assert theirs > 2.4 * want


@pytest.mark.parametrize("model", ["gpt2-medium", "tiny-moe"])
def test_non_llama_blocks_keep_megatron_selective(model: str) -> None:
    """GPT (two-matrix MLP) and routed-expert blocks do not issue torchtitan's seven mms: the
    record falls back to the graph's Megatron-style selective pricing, bytes and time (tiny-moe's
    first, dense SwiGLU block is priced as torchtitan's)."""
    g = graph_for(model, precision="bf16")
    own = [sac_block_costs(x, g, "torchtitan-op") is not None for x in g.layers]
    assert own == [x.kind == "block" and not x.num_experts and model == "tiny-moe"
                   for x in g.layers]
    gpu = load_cluster("dgx-a100").groups[0].gpu
    kw = {"precision": "bf16", "profiles": ProfileSet()}
    a = layer_cost_table(g, gpu, 1, 1, "selective", framework=TORCHTITAN, **kw)
    b = layer_cost_table(g, gpu, 1, 1, "selective",
                         framework=dataclasses.replace(TORCHTITAN, sac_policy=""), **kw)
    for col in ("activation_bytes", "bwd_s"):
        pairs = zip(_per_layer(getattr(a, col)), _per_layer(getattr(b, col)), own, strict=True)
        assert all(x == pytest.approx(y, rel=1e-12) for x, y, mine in pairs if not mine)


def test_layer_policy_is_the_mean_of_full_and_none() -> None:
    g = graph_for("gpt2-medium", precision="bf16")
    block = next(x for x in g.layers if x.kind == "block")
    assert sac_block_costs(block, g, "torchtitan-layer") == (
        0.5, 0.5, (block.activation_bytes_full + block.activation_bytes) / 2)
    # every 4th block (`selective_ac_option = "4"`): a quarter of a forward per block, and
    # one full-checkpoint saving in four
    assert sac_block_costs(block, g, "torchtitan-layer", 4) == pytest.approx(
        (0.25, 0.25, (block.activation_bytes_full + 3 * block.activation_bytes) / 4))


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="sac_policy"):
        Framework(sac_policy="op")
    with pytest.raises(ValueError, match="not both"):
        Framework(sac_policy="torchtitan-op", recompute_gemm_fraction=0.3,
                  recompute_memory_fraction=1.0)


def test_cli_estimate_prices_32_llama_blocks_at_the_closed_form() -> None:
    """`hetplan estimate llama3-8b --framework torchtitan --recompute selective`, FSDP over 64
    A100s at local batch 2, 8192 tokens (torchtitan's A100 setting): activations are 32 blocks
    at the closed form plus the embedding's and head's own bytes, two sequences each; the run
    fits (it was priced at Megatron's selective, 90.3 GiB of activations: refused)."""
    args = ["estimate", "llama3-8b", "dgx-a100", "--framework", "torchtitan", "--recompute",
            "selective", "--zero", "3", "--micro-batch", "2", "--seq-len", "8192",
            "--no-profiles", "--json"]
    out = subprocess.run([sys.executable, "-m", "planner.cli.main", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    g = graph_for("llama3-8b", seq_len=8192, precision="bf16")
    rest = sum(x.saved_bytes("none") for x in g.layers if x.kind != "block")
    want = 2 * (LAYERS * _block_closed_form(8192) + rest) / GIB
    assert data["stages"][0]["memory_gib"]["activations"] == pytest.approx(want, abs=2e-6)
    assert data["feasible"]
