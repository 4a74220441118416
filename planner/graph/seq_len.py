"""The training sequence length: the caller's choice, else a default for a HuggingFace config.

A config.json says how long a context the model supports (`max_position_embeddings`:
131,072 for Llama 3.1 and Qwen2.5-7B), not how long its training sequences are. Planning
at that length prices attention for 128k tokens per sequence (thousands of seconds per
iteration) when the user most likely trains at a few thousand, so a config.json without
`--seq-len` gets `DEFAULT_HF_SEQ_LEN` (or less, when the model supports less) and a notice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from planner.errors import HetplanError

__all__ = ["DEFAULT_HF_SEQ_LEN", "Notice", "check_seq_len", "choose_seq_len", "print_notice"]

# The length most open pretraining runs spend most of their tokens at: Llama 2 (4,096),
# Qwen2 and Qwen2.5 before their long-context stage (4,096), OLMo 2 (4,096); Llama 3 used
# 8,192 and long-context stages reach 32k-128k, which users ask for with `--seq-len`. The
# smaller figure also keeps the first plan of an unknown model cheap and fitting.
DEFAULT_HF_SEQ_LEN = 4096

Notice = Callable[[str], None]


def print_notice(line: str) -> None:
    """The default notice channel: one line on stderr (stdout stays the table or JSON)."""
    print(line, file=sys.stderr)


def check_seq_len(value: Any, where: str = "seq_len") -> int:
    """`value` as a sequence length: a positive integer, else one HetplanError line."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HetplanError(f"{where} {value!r}: the sequence length must be a positive whole "
                           "number of tokens, e.g. 4096")
    return value


def choose_seq_len(max_positions: Any, requested: int | None, *, where: str,
                   architecture: str) -> tuple[Any, str | None]:
    """The seq_len to plan a HuggingFace config at, and the line to tell the user (or None).

    `requested` (already checked) wins; above the model's `max_positions` it is kept with a
    warning, since RoPE models are routinely trained past it with context extension and a
    learned position table is simply priced at the longer length. Without a request:
    min(max_positions, DEFAULT_HF_SEQ_LEN) and a notice naming `--seq-len`. A malformed
    `max_positions` is returned as it is, for ModelSpec to name the field.
    """
    if not isinstance(max_positions, int) or isinstance(max_positions, bool) or max_positions < 1:
        return (requested if requested is not None else max_positions), None
    if requested is not None:
        if requested > max_positions:
            extra = ("RoPE needs context extension (e.g. rope_scaling) to train this long"
                     if architecture == "llama" else
                     f"the learned position table is priced at {requested:,} rows")
            return requested, (f"warning: {where}: seq_len {requested:,} is above the model's "
                               f"max_position_embeddings {max_positions:,}; {extra}")
        return requested, None
    chosen = min(max_positions, DEFAULT_HF_SEQ_LEN)
    return chosen, (f"notice: {where}: planning at seq_len {chosen:,} tokens "
                    f"(max_position_embeddings {max_positions:,} is the longest supported "
                    "context, not a training length); pass --seq-len N to change it")
