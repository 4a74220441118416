"""torchtitan's FSDP2 alongside pipeline parallelism holds the whole stage's weights gathered
and its gradients whole in fp32 through the step (`Framework.fsdp_whole_stage_under_pp`):
torchtitan's `apply_fsdp` does not reshard after forward when PP is on, and torch's pipeline
stage runs every backward without resharding or gradient sync until the last."""

from __future__ import annotations

import json

import pytest

from tests.cli import run_cli

# Llama 3 8B: q, o 4096², k, v 4096 × 1024, SwiGLU 3 × 4096 × 14,336, two RMSNorm weights.
BLOCK = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
TABLE = 128_256 * 4096


def _stage0(capsys: pytest.CaptureFixture[str], pp: int, dp: int) -> dict[str, float]:
    code, out, err = run_cli(["estimate", "llama3-8b", "dgx-a100", "--tp", "1", "--pp",
                              str(pp), "--dp", str(dp), "--global-batch", "128",
                              "--recompute", "full", "--zero", "3", "--framework",
                              "torchtitan", "--json"], capsys)
    assert code in (0, 3), err
    return json.loads(out)["stages"][0]["memory_gib"]


def test_pp_holds_the_whole_stage_gathered_with_fp32_gradients(
        capsys: pytest.CaptureFixture[str]) -> None:
    # pp 2: stage 0 is the embedding and 16 blocks. Its shards (2 + 2 B / 32) plus every
    # weight gathered in bf16 (2 B) and every gradient accumulated unsharded in fp32 (4 B).
    params = TABLE + 16 * BLOCK
    mem = _stage0(capsys, 2, 32)
    assert mem["weights"] == pytest.approx((2 * params / 32 + 2 * params) / 2**30, rel=1e-4)
    assert mem["gradients"] == pytest.approx((2 * params / 32 + 4 * params) / 2**30, rel=1e-4)
    assert mem["optimizer"] == pytest.approx(12 * params / 32 / 2**30, rel=1e-4)


def test_without_pp_only_the_running_and_prefetched_layer(
        capsys: pytest.CaptureFixture[str]) -> None:
    # pp 1: ZeRO-3 as before, 1/64 of the 16-bit state plus the largest layer (the
    # embedding's table; the head's adds the final norm) gathered twice, 2 B each.
    params = 2 * TABLE + 32 * BLOCK + 4096
    mem = _stage0(capsys, 1, 64)
    gathered = 2 * (TABLE + 4096) * 2
    assert mem["weights"] == pytest.approx((2 * params / 64 + gathered) / 2**30, rel=1e-4)
    assert mem["gradients"] == pytest.approx((2 * params / 64 + gathered) / 2**30, rel=1e-4)
