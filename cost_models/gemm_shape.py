"""Time of one GEMM from its shape: tile and wave quantisation under a memory roofline.

A GEMM C[M, N] = A[M, K] · B[K, N] runs as output tiles of tm × tn, one thread block per tile,
one block per SM at a time: the GPU works through ceil(M/tm) · ceil(N/tn) tiles in
ceil(tiles / SMs) waves, and every wave costs as much as a full one (NVIDIA, "Matrix
Multiplication Background User's Guide", §"Dimension Quantization Effects": tile quantisation
pads M and N up to the tile, wave quantisation pads the tile count up to whole waves of
108 tiles on an A100 with 256×128 tiles). Small output grids with a long K loop split K over
several blocks (cuBLAS split-K), trading extra fp32 partial-sum traffic for more blocks.
Time is the faster of these kernel configurations, each the slower of its padded compute at
the generation's fitted wide-GEMM rate and its HBM traffic at the memory-bound rate.

The fitted efficiency (`cost_models.efficiency`) stays the ceiling: a large, aligned GEMM has
no padding and (nearly) whole waves, so it takes FLOPs / (peak · efficiency) as before; the
shape only adds losses. Anthony et al. 2024 ("The Case for Co-Designing Model Architectures
with Hardware", GEMM sweeps on A100/H100) measure the same ceiling: large GEMMs plateau well
below the datasheet peak, while sizes off multiples of the tile and small or TP-split widths
fall off it in the steps these two effects predict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "TILES",
    "GemmShape",
    "Tile",
    "gemm_shape_s",
    "shape_factor",
]


@dataclass(frozen=True, slots=True)
class Tile:
    """A GEMM kernel's output tile (tm × tn) and the share of the wide-GEMM rate it reaches."""

    tm: int
    tn: int
    rate: float
    """Per-SM rate relative to the largest tiles: operand reuse per tile, tm·tn / (tm + tn),
    relative to a 128 × 128 tile (64) and capped at 1: smaller tiles reload A and B more often
    per multiply-add and starve the tensor cores (the User's Guide ranks 256×128 / 128×256 as
    the most efficient, then 128×128, 128×64, 64×64 the least). Not fitted: an assumption."""


def _reuse_rate(tm: int, tn: int) -> float:
    return min(1.0, tm * tn / (tm + tn) / 64.0)


TILES: tuple[Tile, ...] = tuple(
    Tile(tm, tn, _reuse_rate(tm, tn))
    for tm, tn in ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64)))
"""The thread-block tiles cuBLAS chooses among on Volta to Hopper (User's Guide, "Tile
Quantization": 256×128, 128×256, 128×128, 256×64, 64×256, 128×64, 64×128, 64×64); the model
takes whichever gives the shortest time, as cuBLAS's heuristics aim to."""

_SPLIT_K = (1, 2, 4, 8, 16)
_MIN_K_PER_SPLIT = 256
"""A split-K slice keeps at least this many K elements (a few main-loop iterations of 32-64)."""
_PARTIAL_BYTES = 4
"""Split-K partial sums are fp32: each slice writes M·N of them and the reduction reads them."""


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One GEMM, C[m, n] = A[m, k] · B[k, n]."""

    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def gemm_shape_s(shape: GemmShape, *, wide_flops_per_s: float, memory_bytes_per_s: float,
                 element_bytes: float, sm_count: int | None,
                 tiles: tuple[Tile, ...] = TILES) -> float:
    """Seconds of one GEMM on a GPU whose large, aligned GEMMs reach `wide_flops_per_s` and
    whose memory-bound kernels reach `memory_bytes_per_s`, with `sm_count` SMs (None: wave
    quantisation unknown, tile quantisation only), `element_bytes` per operand element."""
    m, n, k = shape.m, shape.n, shape.k
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    base_bytes = element_bytes * (m * k + k * n + m * n)
    best = math.inf
    for tile in tiles:
        grid = math.ceil(m / tile.tm) * math.ceil(n / tile.tn)
        for split in _SPLIT_K:
            if split > 1 and k < split * _MIN_K_PER_SPLIT:
                break
            blocks = grid * split
            k_slice = math.ceil(k / split)
            tile_flops = 2.0 * tile.tm * tile.tn * k_slice
            if sm_count:
                waves = math.ceil(blocks / sm_count)
                compute_s = waves * sm_count * tile_flops / (wide_flops_per_s * tile.rate)
            else:
                compute_s = blocks * tile_flops / (wide_flops_per_s * tile.rate)
            nbytes = base_bytes + (2 * split * m * n * _PARTIAL_BYTES if split > 1 else 0.0)
            best = min(best, max(compute_s, nbytes / memory_bytes_per_s))
    return best


@lru_cache(maxsize=65536)
def shape_factor(shapes: tuple[GemmShape, ...], *, wide_flops_per_s: float,
                 memory_bytes_per_s: float, element_bytes: float,
                 sm_count: int | None) -> float:
    """Time of `shapes` over the time of their FLOPs at the wide-GEMM rate (>= ~1): how much
    longer these GEMMs take than ideal ones of the same FLOPs. 1.0 for no GEMMs. Cached: the
    cost tables ask once per (layer shape, TP, micro-batch, GPU)."""
    flops = sum(s.flops for s in shapes)
    if flops <= 0:
        return 1.0
    total = sum(gemm_shape_s(s, wide_flops_per_s=wide_flops_per_s,
                             memory_bytes_per_s=memory_bytes_per_s,
                             element_bytes=element_bytes, sm_count=sm_count) for s in shapes)
    return total / (flops / wide_flops_per_s)
