"""What a transformer block of hetplan's runtime saves for its backward, measured with
saved-tensor hooks on the real block split by the real `stage.apply_tp`, in ONE worker process
over a fake TP process group (forked by `run_local`, so this process starts no process group),
against the graph and `estimate`.

On CPU (here) torch's `rms_norm` is its composite, which keeps the normalised input for the
weight's gradient beside its input; CUDA runs `_fused_rms_norm`, whose backward keeps only the
input and the per-token rstd (its autograd node saves input, weight and result1:
torch/include/torch/csrc/autograd/generated/Functions.h, FusedRmsNormBackward0), and the graph
counts what CUDA keeps (planner/graph/measure.py). The closed forms below list both."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from cost_models.profiles import ProfileSet
from planner.costing.stage_cost import stage_cost
from planner.graph.extract import extract
from planner.graph.load_spec import load_model_spec
from planner.models import build_element
from planner.runtime.local import run_local
from planner.runtime.stage import ChunkModule, apply_tp
from tests.test_cost_fixtures import gpu


@contextlib.contextmanager
def fake_tp(tp: int) -> Iterator[Any]:
    """A 1-D TP mesh of `tp` ranks in this (worker) process: torch's fake process group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    try:
        yield init_device_mesh("cpu", (tp,))
    finally:
        dist.destroy_process_group()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _block_saved_bytes(name: str, tp: int) -> int:
    """Bytes of the distinct storages one block of `name` saves for one sequence on one TP
    rank (weights apart), as the runtime's chunk runs it."""
    return run_local(_block_worker, 1, name, tp)[0]


def _block_worker(rank: int, world: int, store_dir: str, name: str, tp: int) -> int:
    spec = load_model_spec(name)
    block = build_element(spec, 1, device="cpu")
    with fake_tp(tp) as mesh:
        if tp > 1:
            apply_tp(block, mesh, "block")
        weights = {_local(p).untyped_storage().data_ptr() for p in block.parameters()}
        kept: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            st = _local(t).untyped_storage()
            if st.data_ptr() not in weights:
                kept[st.data_ptr()] = st.nbytes()
            return t

        x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            ChunkModule([block], frozenset(), mesh)(x)
    return sum(kept.values())


def composite_norm_bytes(name: str) -> float:
    """Bytes per sequence and norm that CPU's composite RMSNorm keeps beyond CUDA's fused
    one at fp32: the normalised input, s·h·4 (0 for LayerNorm, fused on both)."""
    spec = load_model_spec(name)
    return 0.0 if spec.architecture == "gpt" else spec.seq_len * spec.hidden_size * 4.0


def _replicated_bytes(name: str) -> tuple[float, float]:
    """(on CPU, on CUDA) bytes per sequence a block keeps whole on every TP rank without SP,
    fp32: each norm's input, its output (the next GEMMs' input) and its per-token statistics
    (LayerNorm: mean and rstd; RMSNorm: rstd), RMSNorm's composite also its normalised input
    (CPU only); a rotary block also the rotation tables, (seq, head_dim / 2) cos and sin for
    q and for k."""
    spec = load_model_spec(name)
    s, h, f = spec.seq_len, spec.hidden_size, 4
    if spec.architecture == "gpt":
        gpu_bytes = 2 * (2 * s * h + 2 * s) * f
        return gpu_bytes, gpu_bytes
    d = h // spec.num_attention_heads
    gpu_bytes = (2 * (2 * s * h + s) + 4 * s * d // 2) * f
    return gpu_bytes + 2 * composite_norm_bytes(name), gpu_bytes


# tiny-llama's 2 KV heads allow TP 2 at most.
@pytest.mark.parametrize(("name", "tp"), [("tiny-llama", 1), ("tiny-llama", 2), ("tiny", 1),
                                          ("tiny", 2), ("tiny", 4)])
def test_block_keeps_the_graphs_bytes_split_but_its_norms_whole(name: str, tp: int) -> None:
    # At TP 1 the runtime's block keeps what the graph records plus, on CPU, the composite
    # RMSNorms' normalised copies (before: a rotary block kept 8,192 B more, the attention
    # output twice: the kernel's and a copy as the o-projection's input, since rotary q came
    # out heads-major). At TP t the norms' inputs, outputs and statistics (and rotation
    # tables) stay whole; the rest splits.
    graph = extract(load_model_spec(name))
    whole = graph.layers[1].activation_bytes
    rep_cpu, rep_gpu = _replicated_bytes(name)
    assert _block_saved_bytes(name, tp) == rep_cpu + (whole - rep_gpu) / tp


@pytest.mark.parametrize(("name", "tp"), [("tiny-llama", 2), ("tiny", 2), ("tiny", 4)])
def test_block_price_covers_what_the_gpu_keeps(name: str, tp: int) -> None:
    # estimate prices a block at 5·s·h elements whole plus the rest / TP (Korthikanti et al.
    # 2023: norm inputs, GEMM inputs and dropout masks). On the GPU the runtime keeps 4·s·h
    # whole plus statistics and tables (no dropout here), so the price stays above what it
    # keeps, by less than one s·h per block.
    spec = load_model_spec(name)
    graph = extract(spec)
    s, h = spec.seq_len, spec.hidden_size
    _, rep_gpu = _replicated_bytes(name)
    gpu_kept = rep_gpu + (graph.layers[1].activation_bytes - rep_gpu) / tp
    price = stage_cost(graph, 1, 2, gpu(), tp, 1, "none", precision="fp32",
                       profiles=ProfileSet()).activation_bytes_per_microbatch
    assert gpu_kept <= price < gpu_kept + 4 * s * h


def _norm_input_bytes_worker(rank: int, world: int, store_dir: str, name: str) -> list[int]:
    """Bytes per element of each norm's input in one block and the head, run as the runtime
    runs them: fp32 weights, fp32 embedding output, under bf16 autocast (CPU autocast shows
    the same dtype flow as CUDA's: the GEMMs in bf16, residual adds in fp32)."""
    spec = load_model_spec(name)
    block = build_element(spec, 1, device="cpu")
    head = build_element(spec, spec.num_layers + 1, device="cpu")
    widths: list[int] = []
    for m in (*block.modules(), *head.modules()):
        if isinstance(m, torch.nn.RMSNorm | torch.nn.LayerNorm):
            m.register_forward_pre_hook(lambda _m, args: widths.append(args[0].element_size()))
    with fake_tp(1) as mesh:
        x = torch.randn(1, spec.seq_len, spec.hidden_size, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ChunkModule([block, head], frozenset(), mesh)(x)
    return widths


@pytest.mark.parametrize("name", ["tiny-llama", "tiny"])
def test_norms_save_the_fp32_residual_stream_under_autocast(name: str) -> None:
    # Measured: under bf16 autocast with fp32 weights every norm (two per block, the head's
    # final norm) takes a 4-byte input, which its fused kernel saves; the graph counts them at
    # 2 B. hetplan's price of the block and head must hold s·h·2 more per norm than a
    # framework whose stream is the graph's dtype (before: the same).
    import dataclasses

    from planner.costing.framework import HETPLAN_RUNTIME

    widths = run_local(_norm_input_bytes_worker, 1, name)[0]
    assert widths == [4, 4, 4]
    spec = load_model_spec(name)
    graph = dataclasses.replace(extract(spec), dtype_bytes=2)
    narrow = dataclasses.replace(HETPLAN_RUNTIME, residual_stream_bytes=0)
    n = len(graph.layers)
    args = dict(precision="bf16", profiles=ProfileSet())
    ours = stage_cost(graph, 1, n, gpu(), 1, 1, "none", framework=HETPLAN_RUNTIME, **args)
    base = stage_cost(graph, 1, n, gpu(), 1, 1, "none", framework=narrow, **args)
    norms = 2 * (n - 2) + 1
    expected = norms * spec.seq_len * spec.hidden_size * (widths[0] - 2)
    assert (ours.activation_bytes_per_microbatch - base.activation_bytes_per_microbatch
            == expected)
