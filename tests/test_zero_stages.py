"""ZeRO stages 0-3 in the cost model and on `hetplan estimate --zero`."""

from __future__ import annotations

import json

import pytest

from cost_models.memory import FRAMEWORK_OVERHEAD_GIB, GIB, dp_sync_bytes_per_param
from planner.costing.stage_cost import StageCost
from planner.costing.stage_memory import stage_peak_memory_gib
from tests.cli import run_cli


@pytest.mark.parametrize(("zero", "published_gb"), [(0, 120.0), (1, 31.4), (2, 16.6),
                                                     (3, 1.9)])
def test_model_state_matches_the_zero_paper_figure_1(zero: int, published_gb: float) -> None:
    # Rajbhandari et al., SC'20, Figure 1: Ψ = 7.5 B parameters, N_d = 64, K = 12 (Adam, mixed
    # precision): 120, 31.4, 16.6 and 1.9 GB of model state per GPU for baseline, P_os,
    # P_os+g and P_os+g+p.
    psi = 7.5e9
    cost = StageCost(fwd_s=0, bwd_s=0, bwd_weight_s=0, params_per_gpu=int(psi),
                     static_bytes_per_gpu=16 * psi, optimizer_bytes_per_gpu=12 * psi,
                     activation_bytes_per_microbatch=0, p2p_bytes=0, optimizer_step_s=0)
    state_gb = (stage_peak_memory_gib(cost, 0, 64 if zero else 1, max(zero, 1))
                - FRAMEWORK_OVERHEAD_GIB) * GIB / 1e9
    assert state_gb == pytest.approx(published_gb, abs=0.05)


def test_zero3_moves_one_and_a_half_times_the_allreduce_bytes() -> None:
    # ZeRO paper §7.2.2: stage 3 moves 3Ψ (two all-gathers and a reduce-scatter) against the
    # all-reduce's 2Ψ, at 16-bit gradients; here gradients reduce in fp32 (4 B) and weights
    # gather in 2 B: (4 + 2·2) / 2 per parameter in all-reduce units, per micro-batch.
    assert dp_sync_bytes_per_param(2, 3) == 4.0
    assert dp_sync_bytes_per_param(2, 3, microbatches=4) == 16.0
    assert dp_sync_bytes_per_param(2, 1) == dp_sync_bytes_per_param(2, 2) == 3.0


def _peak(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[float, float]:
    code, out, err = run_cli(["estimate", "llama3-70b", "dgx-a100", "--tp", "1", "--pp", "1",
                              "--dp", "64", "--recompute", "full", "--json", *flags], capsys)
    data = json.loads(out)
    assert code == (0 if data["feasible"] else 3), err  # exit 3 means "does not fit"
    return max(s["peak_memory_gib"] for s in data["stages"]), data["iteration_time_s"]


def test_estimate_zero3_needs_less_memory_than_zero1_and_zero1_alias(
        capsys: pytest.CaptureFixture[str]) -> None:
    z1, t1 = _peak(capsys, "--zero", "1")
    z3, _ = _peak(capsys, "--zero", "3")
    assert _peak(capsys, "--zero1") == (z1, t1)
    # --zero1 beside --zero N is stage max(N, 1), as a plan file's two fields read.
    assert _peak(capsys, "--zero1", "--zero", "0") == (z1, t1)
    assert _peak(capsys, "--zero1", "--zero", "3")[0] == z3
    # 70.55 B parameters under hetplan's runtime (fp32 parameters, autocast): ZeRO-1 keeps
    # fp32 weights and gradients whole (4 + 4 B/param), a 64th of the slice's fp32 master and
    # Adam moments (12 B) and the autocast copy of every GEMM weight (2 B; all but the
    # 128,256 × 8,192 embedding table and the norms). ZeRO-3 (FSDP2) keeps a 64th of fp32
    # weights, gradients and moments (4 + 4 + 8 B, no master), but holds its largest layer
    # (the 128,256 × 8,192 token table, gathered in fp32: twice its parameters in 16-bit
    # ones) twice over (running and prefetched), with gradients alike; activations are the
    # same.
    params, table = 70.55e9, 128_256 * 8_192
    gathered = 2 * (2 * table) * (2 + 2)
    z1_state = 8 * params + 12 * params / 64 + 2 * (params - table)
    z3_state = 16 * params / 64 + gathered
    assert z1 - z3 == pytest.approx((z1_state - z3_state) / 2**30, rel=0.01)


def test_bad_zero_flags_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for flags, msg in ((["--zero", "4"], "--zero 4: use 0, 1, 2 or 3"),
                       (["--zero1", "--zero", "-1"], "--zero -1: use 0, 1, 2 or 3")):
        code, _, err = run_cli(["estimate", "tiny", "dgx-a100", "--tp", "1", "--pp", "1",
                                *flags], capsys)
        assert code == 2 and msg in err and "Traceback" not in err



def test_megatron_and_deepspeed_with_pipelines_price_zero3_as_zero1(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Their framework records run ZeRO-1 at most alongside pipeline parallelism (distributed
    # optimizer, DeepSpeed's pipeline engine): asked for ZeRO-3 with pp 2, stage 0 holds its
    # 16-bit weights whole, the embedding (128,256 × 4,096) and 16 Llama-3-8B blocks (q, o
    # 4096², k, v 4096 × 1024, SwiGLU 3 × 4096 × 14,336, two norms), and a note says so.
    # At pp 1 (Megatron-FSDP, DeepSpeed stage 3) ZeRO-3 is priced as asked (output layer and
    # final norm: the last stage's).
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    whole = (128_256 * 4096 + 16 * block) * 2 / 2**30
    for fw in ("megatron", "deepspeed"):
        for pp, dp in ((2, 32), (1, 64)):
            code, out, err = run_cli(["estimate", "llama3-8b", "dgx-a100", "--tp", "1", "--pp",
                                      str(pp), "--dp", str(dp), "--global-batch", "128",
                                      "--recompute", "full", "--zero", "3", "--framework", fw,
                                      "--json"], capsys)
            assert code == 0, err
            data = json.loads(out)
            weights = data["stages"][0]["memory_gib"]["weights"]
            if pp == 2:
                assert weights == pytest.approx(whole, rel=1e-4)
                assert data["zero_priced"] == [[1, 1]] * dp
            else:  # 1/64 of all 16-bit weights, plus the embedding gathered twice
                params = 2 * 128_256 * 4096 + 32 * block + 4096
                sharded = (params * 2 / 64 + 2 * 128_256 * 4096 * 2) / 2**30
                assert weights == pytest.approx(sharded, rel=1e-4)
                assert "zero_priced" not in data
