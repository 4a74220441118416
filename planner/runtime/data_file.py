"""Training data from token files: flat binary arrays of token ids (nanoGPT's and Megatron's
`.bin`), uint16 or uint32, one file or a folder of them (read in name order, concatenated).

Samples are windows of seq_len + 1 tokens (inputs and the labels shifted by one) that tile
the token stream without overlap. Sampling is sequential: sample j of the run is window
(start + j) mod n, where `start` is drawn once from the seed, so a batch is a function of
the number of samples consumed before it, and a resumed run continues exactly where the
checkpoint left off. The files are memory-mapped: nothing is read until a batch needs it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from planner.errors import HetplanError

__all__ = ["DTYPES", "TokenData"]

DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


class TokenData:
    """Token windows from `path` (a file, or a folder of `*.bin` files)."""

    def __init__(self, path: str | Path, seq_len: int, *, dtype: str = "uint16",
                 vocab_size: int | None = None, seed: int = 0) -> None:
        if dtype not in DTYPES:
            raise HetplanError(f"--data-dtype {dtype!r}: use uint16 or uint32")
        p = Path(path)
        files = sorted(p.glob("*.bin")) if p.is_dir() else [p]
        if not files or not all(f.is_file() for f in files):
            where = f"{p}/*.bin" if p.is_dir() else str(p)
            raise HetplanError(f"--data {where}: no token file there; write token ids as a flat "
                               f"{dtype} array (e.g. numpy's tofile)")
        item = np.dtype(DTYPES[dtype]).itemsize
        self.arrays = []
        for f in files:
            size = f.stat().st_size
            if size % item:
                raise HetplanError(f"--data {f}: {size} bytes is not a whole number of {dtype} "
                                   f"tokens; check --data-dtype")
            if size:
                self.arrays.append(np.memmap(f, dtype=DTYPES[dtype], mode="r"))
        self.lengths = [len(a) for a in self.arrays]
        self.seq_len, self.vocab_size, self.where = seq_len, vocab_size, str(p)
        total = sum(self.lengths)
        self.windows = (total - 1) // seq_len
        if self.windows < 1:
            raise HetplanError(f"--data {p}: {total} tokens, fewer than one sample of "
                               f"{seq_len + 1} (the model's sequence plus one)")
        gen = torch.Generator().manual_seed(seed)
        self.start = int(torch.randint(self.windows, (1,), generator=gen))
        self.offsets = np.cumsum([0, *self.lengths])

    def _tokens(self, begin: int, count: int) -> np.ndarray:
        """`count` tokens of the concatenated stream from `begin` (may span files)."""
        out = np.empty(count, dtype=np.int64)
        done = 0
        i = int(np.searchsorted(self.offsets, begin, side="right")) - 1
        while done < count:
            a = self.arrays[i]
            lo = begin + done - int(self.offsets[i])
            take = min(count - done, len(a) - lo)
            out[done:done + take] = a[lo:lo + take]
            done += take
            i += 1
        return out

    def batch(self, consumed: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels), each (rows, seq_len) int64: samples consumed .. consumed + rows."""
        seq = self.seq_len
        rows_out = []
        for j in range(consumed, consumed + rows):
            w = (self.start + j) % self.windows
            rows_out.append(self._tokens(w * seq, seq + 1))
        tokens = torch.from_numpy(np.stack(rows_out))
        if self.vocab_size is not None:
            top = int(tokens.max())
            if top >= self.vocab_size:
                raise HetplanError(f"--data {self.where}: token id {top} is outside the model's "
                                   f"vocabulary of {self.vocab_size}; was it tokenized for "
                                   "another model, or is --data-dtype wrong?")
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
