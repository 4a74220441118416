"""`hetplan estimate ... --cp N --seq-len N`: the long-context estimate the issue asks for."""

from __future__ import annotations

import json

import pytest

from cost_models.memory import FRAMEWORK_OVERHEAD_GIB
from tests.cli import run_cli

LONG = ["llama3-70b", "dgx-a100", "--seq-len", "131072", "--global-batch", "16",
        "--tp", "8", "--pp", "2", "--sequence-parallel", "--recompute", "full", "--zero", "1"]


def test_estimate_llama3_70b_cp4_at_131072_tokens(capsys) -> None:
    code, out, err = run_cli(["estimate", *LONG, "--dp", "1", "--cp", "4", "--json"], capsys)
    assert code == 0, err
    four = json.loads(out)
    code, out, err = run_cli(["estimate", *LONG, "--dp", "4", "--json"], capsys)
    assert code in (0, 3), err
    one = json.loads(out)
    # The same 64 GPUs: cp 4 holds a quarter of every sequence's activations per GPU.
    assert [s["cp"] for s in four["stages"]] == [4] * 8
    for a, b in zip(one["stages"], four["stages"], strict=True):
        assert b["memory_gib"]["activations"] == pytest.approx(
            a["memory_gib"]["activations"] / 4, rel=1e-5)
        assert b["peak_memory_gib"] < a["peak_memory_gib"]
    assert four["feasible"]
    # hetplan's runtime all-gathers K/V: its part of the peak, from the closed form. Whole
    # K/V of a 131 072-token sequence on one TP-8 rank's 1 of 8 KV heads (head_dim 128,
    # bf16): 2 · 131072 · 1 · 128 · 2 B. No position mask (mask-free causal attention).
    whole = 2 * 131072 * 1 * 128 * 2
    # Full recompute: one block's backward, nothing saved: the first stage peaks there, with
    # its cp K/V part. The head is never recomputed; the last stage peaks in its loss instead
    # (its buffers outweigh a block's): under loss_parallel 12 B per logit of its mb / cp
    # sequences and 128,256 / 8 vocabulary columns (vocab_cost.loss_transient_bytes), with
    # no cp K/V held then.
    loss = 12 * four["micro_batch_size"] / 4 * 131072 * 128256 / 8
    for s in four["stages"]:
        if s["stage"] == 0:
            assert s["memory_gib"]["context"] * 2**30 == pytest.approx(
                1.5 * whole + whole * 3 / 4, abs=2**30 * 1e-6)
        else:
            assert "context" not in s["memory_gib"]
            assert (s["memory_gib"]["other"] - FRAMEWORK_OVERHEAD_GIB) * 2**30 == pytest.approx(
                loss, abs=2**30 * 1e-5)
    assert all("context" not in s["memory_gib"] for s in one["stages"])


def test_estimate_with_only_cp_and_seq_len_prints_the_cp_table(capsys) -> None:
    code, out, err = run_cli(["estimate", "llama3-70b", "dgx-a100", "--cp", "4", "--seq-len",
                              "131072"], capsys)
    assert code in (0, 3), err  # tp 1 · pp 1 cannot hold 70 B: infeasible, with the numbers
    assert "CP" in out and "activ" in out and "cp K/V" in out and "Traceback" not in err
    assert "context parallelism: cp 4" in out
    code, _, err = run_cli(["estimate", "llama3-70b", "dgx-a100", "--cp", "3", "--seq-len",
                            "131072"], capsys)
    assert code == 2 and err.count("\n") == 1 and "2 × cp = 6" in err
