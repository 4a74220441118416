"""Megatron-Core + Transformer Engine saved activations against Korthikanti et al. 2023 and
Megatron's interleaved 1F1B warm-up; the published NeMo Llama 3 70B layout (64 H100, TP4 PP8
VP5, mbs 1, seq 8192, fp8) ran, so the megatron record must say it fits."""

from __future__ import annotations

import pytest

from cost_models.catalog import get_gpu
from cost_models.memory import GIB
from cost_models.te_activations import te_block_replicated_bytes, te_block_saved_bytes
from planner.costing.estimate import estimate
from planner.costing.framework import MEGATRON_CORE
from planner.costing.megatron import megatron_plan
from planner.costing.validation.large_runs import _cluster, _graph


def test_gpt_block_is_korthikanti_without_scores_and_masks() -> None:
    """Korthikanti Table 2, 16-bit, no parallelism: s·b·h·(34 + 5·a·s/h). Flash attention keeps
    no s×s scores (the 5·a·s/h term) and NeMo's configs set dropout 0 (the 2·s·h of masks):
    32·s·h, plus flash's fp32 log-sum-exp (4·a·s)."""
    s, h, a = 2048, 12288, 96
    got = te_block_saved_bytes(s, h, 4 * h, h, a, gated=False)
    assert got == 32 * s * h + 4 * a * s
    # Without sequence parallelism Korthikanti's replicated 10·s·h less the 2·s·h of masks.
    assert te_block_replicated_bytes(s, h) == 8 * s * h


def test_fp8_keeps_one_byte_gemm_inputs() -> None:
    """fp8: the normed QKV / FC1 inputs and the FC2 input go to 1 byte; O is kept in bf16 for
    the attention backward and as the projection's fp8 cast: Llama 3 70B drops from 33.5·s·h
    to 29·s·h (plus the log-sum-exp)."""
    s, h, ffn, kv, a = 8192, 8192, 28672, 1024, 64
    bf16 = te_block_saved_bytes(s, h, ffn, kv, a, gated=True)
    fp8 = te_block_saved_bytes(s, h, ffn, kv, a, gated=True, gemm_input_bytes=1)
    assert bf16 - 4 * a * s == pytest.approx(33.5 * s * h)
    assert fp8 - 4 * a * s == pytest.approx(29.0 * s * h)


def test_nemo_llama3_70b_h100_layout_fits() -> None:
    """First stage of TP4 PP8 VP5: Megatron warms up 2·(pp-1) + (vp-1)·pp = 46 chunk passes
    and holds one more (schedules.py get_num_warmup_microbatches), 47 chunks of 2 blocks;
    each block keeps 29·s·h/4 bytes per GPU (fp8, SP). Model state: bf16 weights and grads
    (NeMo's Llama 3 recipe sets grad_reduce_in_fp32 = False) and 12 B/param over dp 2."""
    gpu = get_gpu("H100-SXM5-80GB")
    graph = _graph("LLAMA3-70B", 8192, "bf16")
    cluster = _cluster(gpu, 64, 3200.0)
    plan = megatron_plan(graph, cluster, tp=4, pp=8, dp=2, micro_batch=1, global_batch=128,
                         sequence_parallel=True, schedule="interleaved", virtual_stages=5,
                         zero1=True)
    est = estimate(graph, cluster, plan, precision="fp8", framework=MEGATRON_CORE)
    assert est.feasible
    first = next(x for x in est.stages if x.pipeline == 0 and x.stage == 0)
    s, h = 8192, 8192
    per_block = (te_block_saved_bytes(s, h, 28672, 1024, 64, gated=True, gemm_input_bytes=1)
                 / 4)
    chunks = 2 * (8 - 1) + (5 - 1) * 8 + 1
    # The embedding keeps only its token ids: blocks are the whole of it.
    assert first.memory.activations_gib == pytest.approx(chunks * 2 * per_block / GIB, rel=1e-3)
    assert first.peak_memory_gib < 80.0
