"""ZeRO-2/3 with expert parallelism: routed experts' weights and gradients shard over the
expert-data-parallel group (dp / ep), as their optimizer state does, and ZeRO-3's gathered
layer holds only the GPU's 1/ep of the experts. Expected bytes are closed forms from
Mixtral 8x7B's published shapes (config.json), not from the cost model."""

from __future__ import annotations

import json

import pytest

from tests.cli import run_cli

H, KV, FFN, E, BLOCKS = 4096, 1024, 14336, 8, 8  # mixtral-8x7b; 8 blocks on stage 1 of pp 4
DP, EP = 16, 8
# Per block: q, o (h·h) and k, v (h·kv), two RMSNorms (h), the router (h·E); experts 3·h·ffn.
DENSE = 2 * H * H + 2 * H * KV + 2 * H + H * E
EXPERTS_PER_GPU = E * 3 * H * FFN // EP


def _stage1(capsys: pytest.CaptureFixture[str], zero: str) -> dict[str, float]:
    code, out, err = run_cli(["estimate", "mixtral-8x7b", "dgx-a100", "--tp", "1", "--pp", "4",
                              "--dp", str(DP), "--ep", str(EP), "--global-batch", "64",
                              "--recompute", "full", "--framework", "torchtitan", "--zero", zero,
                              "--json"], capsys)
    assert code == 0, err
    row = json.loads(out)["stages"][1]
    assert tuple(row["layers"]) == (9, 17)
    return row["memory_gib"]


def test_zero2_shards_expert_gradients_over_dp_over_ep(
        capsys: pytest.CaptureFixture[str]) -> None:
    grads = (BLOCKS * DENSE * 2 / DP + BLOCKS * EXPERTS_PER_GPU * 2 / (DP // EP)) / 2**30
    assert _stage1(capsys, "2")["gradients"] == pytest.approx(grads, rel=1e-5)


def test_zero3_shards_expert_weights_over_dp_over_ep_and_gathers_one_ep_share(
        capsys: pytest.CaptureFixture[str]) -> None:
    shard = BLOCKS * DENSE * 2 / DP + BLOCKS * EXPERTS_PER_GPU * 2 / (DP // EP)
    # torchtitan alongside pp 4 keeps the stage's every weight gathered (bf16, 2 B) and its
    # every gradient whole in fp32 (4 B) through the step (Framework.fsdp_whole_stage_under_pp):
    # the dense parts and the GPU's 1/ep of the experts of all 8 blocks.
    whole = BLOCKS * (DENSE + EXPERTS_PER_GPU)
    mem = _stage1(capsys, "3")
    assert mem["weights"] == pytest.approx((shard + 2 * whole) / 2**30, rel=1e-5)
    assert mem["gradients"] == pytest.approx((shard + 4 * whole) / 2**30, rel=1e-5)
