"""GEMM shape model: tile and wave quantisation, the memory roofline, and a layer's GEMMs.

Every expected figure is a closed form: padded tile counts, whole waves, bytes / bandwidth.
"""

from __future__ import annotations

import math

import pytest

from cost_models.catalog import get_gpu
from cost_models.compute import gemm_wide_flops_per_s
from cost_models.efficiency import compute_constants
from cost_models.gemm_shape import GemmShape, Tile, gemm_shape_s, shape_factor
from planner.costing.layer_gemms import layer_gemm_factors, layer_weights
from planner.graph.layers import Layer
from tests.block_layers import block_layer

ONE_TILE = (Tile(128, 128, 1.0),)
WIDE = 200e12  # FLOP/s of a large aligned GEMM
NO_MEMORY_LIMIT = 1e30


def _s(m: int, n: int, k: int, sms: int | None = None, tiles: tuple[Tile, ...] = ONE_TILE,
       bw: float = NO_MEMORY_LIMIT, element_bytes: float = 2.0) -> float:
    return gemm_shape_s(GemmShape(m, n, k), wide_flops_per_s=WIDE, memory_bytes_per_s=bw,
                        element_bytes=element_bytes, sm_count=sms, tiles=tiles)


def test_tile_quantisation_pads_to_whole_tiles() -> None:
    # N = 129 on 128-wide tiles needs 2 tile columns: twice the work of N = 128.
    assert _s(4096, 129, 4096) == pytest.approx(2 * _s(4096, 128, 4096))
    assert _s(4096, 128, 4096) == pytest.approx(2 * 4096 * 128 * 4096 / WIDE)
    # Padding M works the same way.
    assert _s(257, 1024, 4096) == pytest.approx(3 / 2 * _s(256, 1024, 4096))


def test_wave_quantisation_on_108_sms() -> None:
    # K = 256 allows no split-K: 108 tiles are one wave, 109 tiles two (A100, 108 SMs).
    one_wave = _s(108 * 128, 128, 256, sms=108)
    assert one_wave == pytest.approx(2 * 108 * 128 * 128 * 256 / WIDE)
    assert _s(109 * 128, 128, 256, sms=108) == pytest.approx(2 * one_wave)
    # H100 SXM's 132 SMs take the 109 tiles in one wave.
    assert _s(109 * 128, 128, 256, sms=132) == pytest.approx(132 / 108 * one_wave)


def test_split_k_fills_the_gpu_when_the_output_grid_is_small() -> None:
    # 16 output tiles on 108 SMs with K = 16384. Whole K: 1 wave of K; split 4 (64 blocks):
    # 1 wave of K/4; split 8 (128 blocks): 2 waves of K/8; split 16 (256 blocks): 3 waves of
    # K/16, the shortest: 3/16 of the unsplit time.
    m, n, k = 512, 512, 16384
    wave = 2 * 128 * 128 * 108 / WIDE  # one wave's time per K element
    assert _s(m, n, k, sms=108) == pytest.approx(3 * wave * k / 16)


def test_skinny_gemm_is_memory_bound() -> None:
    # A100-SXM4-80GB: a GEMM of 8 tokens through a 4096 x 4096 weight reads the weight once;
    # its time is its bytes over the memory-bound rate, whatever its FLOPs.
    a100 = get_gpu("A100-SXM4-80GB")
    c = compute_constants("ampere")
    bw = a100.hbm_gb_per_s * 1e9 * c.memory_eff
    wide = gemm_wide_flops_per_s(a100, "bf16")
    m, n, k = 8, 4096, 4096
    nbytes = 2 * (m * k + k * n + m * n)
    t = gemm_shape_s(GemmShape(m, n, k), wide_flops_per_s=wide, memory_bytes_per_s=bw,
                     element_bytes=2, sm_count=None)
    assert t == pytest.approx(nbytes / bw)
    assert t > 2 * m * n * k / wide * 5  # far above the compute time


def test_large_aligned_gemm_keeps_the_fitted_rate() -> None:
    # 8192^3 on an A100 with 256x128 tiles: 2048 tiles in ceil(2048 / 108) = 19 waves.
    shapes = (GemmShape(8192, 8192, 8192),)
    f = shape_factor(shapes, wide_flops_per_s=WIDE, memory_bytes_per_s=1e12,
                     element_bytes=2, sm_count=108)
    assert f == pytest.approx(math.ceil(2048 / 108) * 108 / 2048)
    assert 1.0 <= f < 1.01


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (100, 3000, 77), (8192, 1536, 1024),
                                   (2048, 128, 12288), (50257, 4096, 8192)])
def test_shape_only_adds_losses(m: int, n: int, k: int) -> None:
    for sms in (None, 80, 108, 132):
        t = _s(m, n, k, sms=sms, tiles=(Tile(256, 128, 1.0), Tile(128, 128, 1.0),
                                        Tile(64, 64, 0.5)), bw=1.5e12)
        assert t >= 2.0 * m * n * k / WIDE * (1 - 1e-12)
        assert t >= 2.0 * (m * k + k * n + m * n) / 1.5e12 * (1 - 1e-12)


def test_more_work_never_takes_less_time() -> None:
    for sms in (None, 108):
        times = [_s(2048, n, 4096, sms=sms, bw=2e12) for n in range(64, 1100, 37)]
        assert times == sorted(times)


def _llama_block(h: int = 4096, heads: int = 32, kv: int = 8, ffn: int = 14336,
                 seq: int = 2048) -> Layer:
    head_dim = h // heads
    linear = h * (heads + 2 * kv) * head_dim + heads * head_dim * h + 3 * h * ffn
    return block_layer(h, heads, kv, ffn, seq, linear, "layers.0")


def test_block_weights_from_its_dimensions() -> None:
    # Llama 3 8B: QKV 4096 -> 6144 (32 + 2·8 heads of 128), out 4096 -> 4096, SwiGLU 3 x 14336.
    assert layer_weights(_llama_block(), 2048) == (
        (4096, 6144, "col"), (4096, 4096, "row"),
        (4096, 14336, "col"), (4096, 14336, "col"), (14336, 4096, "row"))


def test_tp_split_gemms_lose_more() -> None:
    a100 = get_gpu("A100-SXM4-80GB")
    block = _llama_block()
    factors = [layer_gemm_factors(block, 2048, a100, "bf16", t, 1) for t in (1, 8)]
    for f in factors:
        assert all(x >= 1.0 for x in f)
    # At TP 8 the per-GPU widths are 768, 512 and 1792: more padding and fewer tiles.
    assert factors[1][0] > factors[0][0]
    # A narrow model at TP 8 on short sequences loses far more than a wide one at TP 1.
    small = _llama_block(h=1024, heads=8, kv=8, ffn=2816, seq=512)
    assert layer_gemm_factors(small, 512, a100, "bf16", 8, 1)[0] > factors[0][0] + 0.1


@pytest.mark.parametrize("gpu_name", ["A100-SXM4-80GB", "H100-SXM5-80GB"])
def test_large_model_blocks_keep_their_calibration(gpu_name: str) -> None:
    # GPT-3 175B (h 12288, 96 heads, FFN 49152) at TP 8, 2048 tokens: every per-GPU width is a
    # multiple of 256 and each GEMM fills >= 8 waves, so waves lose at most 1/8 and in
    # practice far less; the fitted large-run constants keep their meaning.
    block = _llama_block(h=12288, heads=96, kv=96, ffn=49152, seq=2048)
    for f in layer_gemm_factors(block, 2048, get_gpu(gpu_name), "bf16", 8, 1):
        assert 1.0 <= f < 1.02
