"""Upper bounds on model and plan numbers, checked when a file or flag is read.

Each is far above any real model or run (largest published dense models: ~130 layers, hidden
~25k, vocabulary ~260k, context ~1M tokens; batches of ~16M tokens) and low enough that the
arithmetic after them stays in range: a typo such as 10^7 layers or a batch of 10^9 is
refused in one line instead of running out of memory or overflowing a tensor size.
"""

from __future__ import annotations

__all__ = ["MAX_CLUSTER_GPUS", "MAX_DEGREE", "MAX_EXPERTS", "MAX_FFN", "MAX_GLOBAL_BATCH",
           "MAX_HIDDEN", "MAX_LAYERS", "MAX_MICROBATCHES", "MAX_NODES", "MAX_SEQ_LEN", "MAX_VOCAB",
           "limit_text"]

MAX_LAYERS = 2_048
"""Transformer blocks. The deepest published model has 1,000 (DeepNet, Wang et al. 2022); a
model's op graph costs ~4 ms of CPU per block to build, so 10^4 blocks already take ~40 s."""
MAX_HIDDEN = 2**20
MAX_FFN = 2**22
MAX_VOCAB = 2**24
MAX_SEQ_LEN = 2**24
MAX_EXPERTS = 2**10
"""Routed experts per layer (DeepSeek-V3: 256; Switch-C: 2,048, the one model above it). The
extraction builds every expert of one block, on the meta device but one module each."""
MAX_GLOBAL_BATCH = 2**24
"""Sequences per iteration (also bounds the micro-batch size)."""
MAX_MICROBATCHES = 2**16
"""Micro-batches per pipeline per iteration: the schedule simulation steps through each."""
MAX_NODES = 2**14
"""Nodes in one group of a cluster file."""
MAX_CLUSTER_GPUS = 2**17
"""GPUs in a whole cluster (the largest training clusters built hold ~10^5)."""
MAX_DEGREE = 2**16
"""TP, PP, DP and EP degrees (a plan is also bounded by its cluster's GPUs)."""


def limit_text(value: int) -> str:
    """`1,048,576 (2^20)` for a large power of two, else `2,048`."""
    exp = value.bit_length() - 1
    return f"{value:,} (2^{exp})" if value == 1 << exp and exp > 10 else f"{value:,}"
