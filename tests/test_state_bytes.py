"""Model state per GPU as each stack holds it, one closed form per regime (`stage_memory`).

hetplan's runtime (`Framework.fp32_params`) trains under `torch.autocast` with fp32 parameters:
on its own ZeRO slices fp32 weights and gradients whole (4 + 4 B), Adam's moments (8 B) and at
ZeRO >= 1 an fp32 master of the slice (4 B), sharded; in a 16-bit plan one 16-bit copy of each
GEMM weight (2 B); under FSDP2 fp32 shards (4 + 4 + 8 B) and gathered 16-bit weights.
Megatron's records keep 2 B weights + 2 B gradients + 12 B fp32 master and moments.
"""

from __future__ import annotations

import pytest

from cost_models.memory import GIB
from cost_models.profiles import ProfileSet
from planner.costing.framework import HETPLAN_RUNTIME, MEGATRON_CORE, Framework
from planner.costing.stage_cost import stage_cost
from planner.costing.stage_memory import shardable_gib, stage_memory
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from tests.test_cost_fixtures import gpt_block_gemm_params, gpt_graph, gpu

H = 1024
P = 2 * (12 * H * H + 13 * H)  # two GPT blocks: weights, biases, two LayerNorms each
G = 2 * gpt_block_gemm_params(H)  # their GEMM operands (not the LayerNorms)
LARGEST = P // 2  # one block
DP = 4


def _parts(precision: str, zero: int, dp: int, gathered: float = 0.0,
           framework: Framework = HETPLAN_RUNTIME) -> tuple[float, float, float]:
    graph = gpt_graph(h=H, layers=4)
    cost = stage_cost(graph, 1, 3, gpu(), 1, 1, "none", precision=precision,
                      profiles=ProfileSet(), framework=framework)
    assert cost.params_per_gpu == P
    mem = stage_memory(cost, 0, dp, zero, gathered)
    return mem.weights_gib * GIB, mem.gradients_gib * GIB, mem.optimizer_gib * GIB


def test_zero0_bf16_fp32_params_moments_only_and_one_autocast_copy() -> None:
    # No slice, no master: the fp32 parameters are what Adam updates.
    w, g, o = _parts("bf16", 0, 1)
    assert w == pytest.approx(4 * P + 2 * G)
    assert g == pytest.approx(4 * P)
    assert o == pytest.approx(8 * P)


def test_zero1_slices_bf16_keep_the_slice_master() -> None:
    # runtime/zero.py ShardedOptimizer clones its slice as the fp32 master: 12 B / DP.
    w, g, o = _parts("bf16", 1, DP)
    assert w == pytest.approx(4 * P + 2 * G)
    assert g == pytest.approx(4 * P)
    assert o == pytest.approx(12 * P / DP)


@pytest.mark.parametrize("zero", [2, 3])
def test_fsdp2_bf16_fp32_shards_and_gathered_16_bit_weights(zero: int) -> None:
    # ZeRO-3: the running and prefetched layers gathered in 16 bits with 16-bit gradients;
    # ZeRO-2 (reshard only after the last backward): every weight of the stage gathered in
    # 16 bits through the step (its norms in fp32, runtime/fsdp.py), one layer's 16-bit
    # gradients. No autocast copies, no master.
    gathered = 2 * LARGEST if zero == 3 else LARGEST
    w, g, o = _parts("bf16", zero, DP, gathered)
    assert w == pytest.approx(4 * P / DP + (2 * gathered if zero == 3 else 2 * G + 4 * (P - G)))
    assert g == pytest.approx(4 * P / DP + 2 * gathered)
    assert o == pytest.approx(8 * P / DP)


def test_fp32_plan_no_autocast_copy_master_only_on_slices() -> None:
    assert _parts("fp32", 0, 1) == pytest.approx((4 * P, 4 * P, 8 * P))
    assert _parts("fp32", 1, DP) == pytest.approx((4 * P, 4 * P, 12 * P / DP))
    gathered = 2 * LARGEST  # FSDP2 without a 16-bit param_dtype gathers fp32 weights
    assert _parts("fp32", 3, DP, gathered) == pytest.approx(
        (4 * P / DP + 4 * gathered, 4 * P / DP + 4 * gathered, 8 * P / DP))


def test_megatron_record_keeps_two_two_twelve() -> None:
    # Rajbhandari et al. 2020 §3.1: 2 + 2 + 12 B, the master at every stage, no autocast copy.
    assert _parts("bf16", 0, 1, framework=MEGATRON_CORE) == pytest.approx(
        (2 * P, 2 * P, 12 * P))
    assert _parts("bf16", 1, DP, framework=MEGATRON_CORE) == pytest.approx(
        (2 * P, 2 * P, 12 * P / DP))
    gathered = 2 * LARGEST
    assert _parts("bf16", 3, DP, gathered, framework=MEGATRON_CORE) == pytest.approx(
        (2 * P / DP + 2 * gathered, 2 * P / DP + 2 * gathered, 12 * P / DP))


def test_shardable_state_is_the_slope_in_the_shard() -> None:
    # `shardable_gib` is d(peak)/d(f): slices shard the 12 B master and moments, FSDP2 the
    # fp32 weights, gradients and moments (4 + 4 + 8 B) at ZeRO-2 and -3 alike.
    graph = gpt_graph(h=H, layers=4)
    cost = stage_cost(graph, 1, 3, gpu(), 1, 1, "none", precision="bf16",
                      profiles=ProfileSet())
    assert shardable_gib(cost, 1) * GIB == pytest.approx(12 * P)
    for zero in (2, 3):
        assert shardable_gib(cost, zero) * GIB == pytest.approx(16 * P)
        assert shardable_gib(cost, zero) * GIB == pytest.approx(
            (stage_memory(cost, 0, 2, zero).total_gib
             - stage_memory(cost, 0, 4, zero).total_gib) * GIB / (1 / 2 - 1 / 4))


def test_measured_gemm_params_are_the_projections_and_the_head() -> None:
    # Llama 3 8B: q, o 4096², k, v 4096 × 1024, SwiGLU 3 × 4096 × 14,336 per block (not its two
    # RMSNorm weights); the untied head's 128,256 × 4,096 matrix (not the final norm); the
    # embedding's table is only looked up.
    graph = extract(load_model_spec("llama3-8b"))
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert graph.layers[1].gemm_params == block == graph.layers[1].params - 2 * 4096
    assert graph.layers[-1].gemm_params == 128_256 * 4096
    assert graph.layers[0].gemm_params == 0
    # A tied head (tiny: 256 × 64 table) casts the embedding's table it uses.
    tiny = extract(load_model_spec("tiny"))
    assert tiny.layers[-1].tied_params == tiny.layers[-1].gemm_params == 256 * 64
    assert tiny.layers[0].gemm_params == 0


def test_fsdp2_zero2_gathers_norms_and_token_tables_in_fp32() -> None:
    # runtime/fsdp.py shards the norms and the token table on their own with fp32 weights:
    # through a ZeRO-2 step the stage holds its GEMM weights gathered in 16 bits and every
    # other weight (the table, the norms, the biases are GEMM operands) at 4 B.
    graph = gpt_graph(h=H, layers=2)
    cost = stage_cost(graph, 0, 3, gpu(), 1, 1, "none", precision="bf16",
                      profiles=ProfileSet(), framework=HETPLAN_RUNTIME)
    table = graph.layers[0].params
    assert cost.params_per_gpu == table + P
    mem = stage_memory(cost, 0, DP, 2, LARGEST)
    whole = 2 * G + 4 * (table + P - G)
    assert mem.weights_gib * GIB == pytest.approx(4 * (table + P) / DP + whole)


def test_zero3_gathered_token_table_counts_its_fp32_bytes() -> None:
    # ZeRO-3's gathered layers in 16-bit parameters: a token table gathered in fp32 counts
    # twice its parameters, a block its non-GEMM weights twice; other stacks' weights once.
    from planner.costing.estimate import _gathered_count

    graph = gpt_graph(h=H, layers=2)
    embed, block = graph.layers[0], graph.layers[1]
    assert _gathered_count(embed, 1, 1, HETPLAN_RUNTIME, True) == 2 * embed.params
    assert _gathered_count(block, 1, 1, HETPLAN_RUNTIME, True) == 2 * block.params - G // 2
    assert _gathered_count(embed, 1, 1, HETPLAN_RUNTIME, False) == embed.params
    assert _gathered_count(embed, 1, 1, MEGATRON_CORE, True) == embed.params
