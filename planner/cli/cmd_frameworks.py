"""`hetplan frameworks [--json]`: what each `--framework` record assumes, with its sources."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from planner.cli.main import app
from planner.cli.output import console, print_json

__all__ = ["framework_record", "frameworks"]


def framework_record(name: str) -> dict[str, Any]:
    """One framework record as plain JSON data (fixed key order)."""
    from cost_models.attention import PRICED, kernel_on
    from planner.costing.framework import FRAMEWORKS

    fw = FRAMEWORKS[name]
    causal = fw.attention_flops_share < 1.0
    # "te" names a different kernel per generation (cost_models.attention.TE_KERNEL).
    priced = sorted(gen for kernel, gen in PRICED
                    if kernel and kernel_on(fw.attention_kernel, gen) == kernel)
    return {
        "name": name,
        "host_dispatch_overlapped": fw.host_dispatch_overlapped,
        "dp_overlap": fw.dp_overlap,
        "tp_comm_overlap": fw.tp_comm_overlap,
        "fused_kernels": fw.fused_kernels,
        "causal_flash_attention": causal,
        "attention_kernel": fw.attention_kernel or "eager (GEMM rate)",
        "attention_kernel_priced_on": priced,
        "vocab_parallel": fw.vocab_parallel,
        "pads_vocab": fw.pads_vocab,
        "vocab_loss": fw.vocab_loss,
        "sp_gathers_before_head": fw.sp_gathers_before_head,
        "sp_head_input_replicated": fw.sp_head_input_replicated,
        "sp_edge_gathers": fw.sp_edge_gathers,
        "moe_tp_allreduce_per_expert": fw.moe_tp_allreduce_per_expert,
        "moe_dispatch_per_tp_rank": ("all routed tokens" if fw.moe_dispatch_whole_per_tp_rank
                                     else "1/tp of the routed tokens"),
        "residual_stream_bytes": fw.residual_stream_bytes or "activation dtype",
        "tied_grad_pairs": fw.tied_grad_pairs,
        "p2p_blocking": fw.p2p_blocking,
        "p2p_per_tp_rank": "1/tp of the boundary" if fw.p2p_scatter_gather else "whole boundary",
        "context_parallel": ("K/V ring overlapped with attention" if fw.cp_ring_overlap
                             else "K/V all-gather before attention, not overlapped"),
        "max_zero_with_pipelines": fw.max_zero,
        "fp8": fw.fp8 or "not used",
        "sources": list(fw.sources),
    }


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@app.command()
def frameworks(
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the runtimes `--framework` prices and what each assumes, with sources."""
    from planner.costing.framework import FRAMEWORKS

    records = [framework_record(n) for n in FRAMEWORKS]
    if json_out:
        print_json({"frameworks": records})
        return
    for r in records:
        console.print(f"[bold]{r['name']}[/bold]")
        console.print(
            f"  host dispatch overlapped with GPU work: {_yes(r['host_dispatch_overlapped'])}; "
            f"DP reduce / param gather overlapped (bucketed): {_yes(r['dp_overlap'])}; "
            f"TP comm overlap: {_yes(r['tp_comm_overlap'])}")
        console.print(
            f"  fused kernels: {_yes(r['fused_kernels'])}; causal flash attention: "
            f"{_yes(r['causal_flash_attention'])}; vocab-parallel embedding/head: "
            f"{_yes(r['vocab_parallel'])}{' (padded)' if r['pads_vocab'] else ''} "
            f"(loss: {r['vocab_loss']}); "
            f"blocking p2p: {_yes(r['p2p_blocking'])}; p2p per TP rank: "
            f"{r['p2p_per_tp_rank']}; fp8: {r['fp8']}")
        console.print(
            f"  under SP: sequence gathered before the final norm: "
            f"{_yes(r['sp_gathers_before_head'])}; LM-head input kept whole: "
            f"{_yes(r['sp_head_input_replicated'])}; gathered at each stage's edge: "
            f"{_yes(r['sp_edge_gathers'])}; MoE TP all-reduces per expert: "
            f"{_yes(r['moe_tp_allreduce_per_expert'])}; residual stream (norm inputs) "
            f"bytes: {r['residual_stream_bytes']}")
        console.print(f"  expert-parallel all-to-all per TP rank: "
                      f"{r['moe_dispatch_per_tp_rank']}")
        console.print(f"  context parallelism: {r['context_parallel']}; ZeRO alongside "
                      f"pipeline parallelism: up to stage {r['max_zero_with_pipelines']}")
        on = ", ".join(r["attention_kernel_priced_on"]) or "none (GEMM rate)"
        console.print(f"  attention kernel: {r['attention_kernel']}; its own published rate "
                      f"priced on: {on}")
        for src in r["sources"]:
            console.print(f"  - {src}")
