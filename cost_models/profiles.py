"""Measured per-layer times that override the analytic compute model where present.

Profile file format (CSV, one row per measurement; docs/cost-model.md has the details):

    gpu,model,hidden_size,seq_len,layer_kind,micro_batch,tp,precision,fwd_ms,bwd_ms,update_ms,source

- `gpu`: catalog name (aliases are resolved when the catalog knows them).
- `model`: model name; `block` rows also match any model with the same `hidden_size` and
  `seq_len` when no row carries the model's own name (embedding and head rows do not: they
  depend on the vocabulary).
- `layer_kind`: `embedding`, `block` or `head` (the LayerGraph kinds).
- `fwd_ms`, `bwd_ms`: one layer, one micro-batch of `micro_batch` sequences, on one GPU of a
  TP group of `tp`, TP communication included (that is how frameworks measure them).
- `update_ms`: optimizer step for the layer's parameters on one GPU (empty when unknown).
Times between measured micro-batch sizes are interpolated linearly. Outside the measured range
the lookup returns the nearest measured size (`ProfileHit.micro_batch`) and the caller scales
by its analytic model's ratio between the two sizes: the profile sets the level, the physics
the shape (fixed per-kernel costs make time grow slower than the batch).
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PROFILE_COLUMNS",
    "ProfileHit",
    "ProfileRow",
    "ProfileSet",
    "default_profiles",
    "normalize_model",
    "read_profile_csv",
    "with_profile_files",
]

PROFILE_COLUMNS = ("gpu", "model", "hidden_size", "seq_len", "layer_kind", "micro_batch", "tp",
                   "precision", "fwd_ms", "bwd_ms", "update_ms", "source")

_DIR = Path(__file__).parent / "profiles"


def _precision_class(precision: str) -> str:
    """fp16 and bf16 run the same kernels at the same speed: a profile of one serves both."""
    return "16bit" if precision in ("fp16", "bf16") else precision


def normalize_model(name: str) -> str:
    """`OPT-350M`, `opt_350m` and `opt350m` all become `opt350m`."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def _catalog_name(name: str) -> str | None:
    """The catalog's name for `name` (an alias resolves), None when the catalog lacks it."""
    try:
        from cost_models.catalog import get_gpu
    except ImportError:
        return None
    try:
        return get_gpu(name).name
    except Exception:
        return None


def _canonical_gpu(name: str) -> str:
    # An unknown name stays as written; it then matches nothing.
    return _catalog_name(name) or name


@dataclass(frozen=True, slots=True)
class ProfileHit:
    """Measured times of one layer at `micro_batch` (the requested size, or the nearest
    measured one when the request lies outside the measured range)."""

    fwd_ms: float
    bwd_ms: float
    update_ms: float | None
    micro_batch: int


@dataclass(frozen=True, slots=True)
class ProfileRow:
    gpu: str
    model: str
    hidden_size: int
    seq_len: int
    layer_kind: str
    micro_batch: int
    tp: int
    precision: str
    fwd_ms: float
    bwd_ms: float
    update_ms: float | None
    source: str


@dataclass(slots=True)
class _Curve:
    mbs: list[int] = field(default_factory=list)
    fwd: list[float] = field(default_factory=list)
    bwd: list[float] = field(default_factory=list)
    upd: list[float | None] = field(default_factory=list)

    def add(self, r: ProfileRow) -> None:
        i = bisect.bisect_left(self.mbs, r.micro_batch)
        if i < len(self.mbs) and self.mbs[i] == r.micro_batch:
            raise ValueError(f"two profile rows for {r.gpu} {r.model} {r.layer_kind} "
                             f"tp={r.tp} micro_batch={r.micro_batch}")
        self.mbs.insert(i, r.micro_batch)
        self.fwd.insert(i, r.fwd_ms)
        self.bwd.insert(i, r.bwd_ms)
        self.upd.insert(i, r.update_ms)

    def at(self, mb: int) -> ProfileHit:
        upd = [u for u in self.upd if u is not None]
        update = sum(upd) / len(upd) if upd else None  # the step does not depend on micro-batch
        mb = min(max(mb, self.mbs[0]), self.mbs[-1])
        return ProfileHit(_interp(self.mbs, self.fwd, mb), _interp(self.mbs, self.bwd, mb),
                          update, mb)


def _interp(xs: list[int], ys: list[float], x: int) -> float:
    """Piecewise-linear in x; x lies within [xs[0], xs[-1]]."""
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    j, k = i - 1, i
    return ys[j] + (ys[k] - ys[j]) * (x - xs[j]) / (xs[k] - xs[j])


class ProfileSet:
    """Measured layer times, looked up by (GPU, model, layer kind, TP, precision, micro-batch)."""

    def __init__(self, rows: Iterable[ProfileRow] = ()) -> None:
        self._by_name: dict[tuple[str, str, str, int, str], _Curve] = {}
        self._by_shape: dict[tuple[str, int, int, str, int, str], _Curve] = {}
        self._names: set[str] = set()
        self.rows: list[ProfileRow] = []
        for r in rows:
            self.add(r)

    def add(self, r: ProfileRow, *, by_shape: bool = True) -> None:
        """`by_shape=False`: found by its model's name only (a newer row of the same shape
        answers for other models)."""
        self._by_name.setdefault(_curve_key(r), _Curve()).add(r)
        if by_shape:
            self._by_shape.setdefault(_shape_key(r), _Curve()).add(r)
        self._names.add(normalize_model(r.model))
        self.rows.append(r)

    def __len__(self) -> int:
        return len(self.rows)

    def lookup(self, gpu: str, model: str, hidden_size: int, seq_len: int, layer_kind: str,
               tp: int, precision: str,
               micro_batch: int) -> ProfileHit | None:
        """Measured times of one layer, or None when nothing matches."""
        name = normalize_model(model)
        precision = _precision_class(precision)
        if name in self._names:
            curve = self._by_name.get((gpu, name, layer_kind, tp, precision))
        elif layer_kind == "block":
            curve = self._by_shape.get((gpu, hidden_size, seq_len, layer_kind, tp, precision))
        else:  # an embedding or head also depends on the vocabulary, which rows do not record
            curve = None
        return None if curve is None else curve.at(micro_batch)

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> ProfileSet:
        return cls(row for p in paths for row in read_profile_csv(p))


def read_profile_csv(path: str | Path) -> list[ProfileRow]:
    """Rows of one profile file; raises ValueError naming the file, line and column."""
    p = Path(path)
    rows: list[ProfileRow] = []
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in PROFILE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{p}: missing profile columns {missing}; expected {PROFILE_COLUMNS}")
        for line, rec in enumerate(reader, start=2):
            if None in rec.values() or None in rec:
                raise ValueError(f"{p}: line {line}: {len(PROFILE_COLUMNS)} columns expected "
                                 f"({', '.join(PROFILE_COLUMNS)})")
            if rec["layer_kind"] not in ("embedding", "block", "head"):
                raise ValueError(f"{p}: line {line}: layer_kind {rec['layer_kind']!r:.40}; use "
                                 "embedding, block or head")
            try:
                upd = rec["update_ms"].strip()
                rows.append(ProfileRow(
                    gpu=rec["gpu"], model=rec["model"], hidden_size=int(rec["hidden_size"]),
                    seq_len=int(rec["seq_len"]), layer_kind=rec["layer_kind"],
                    micro_batch=int(rec["micro_batch"]), tp=int(rec["tp"]),
                    precision=rec["precision"], fwd_ms=float(rec["fwd_ms"]),
                    bwd_ms=float(rec["bwd_ms"]), update_ms=float(upd) if upd else None,
                    source=rec["source"]))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{p}: line {line}: {exc}") from None
            r = rows[-1]
            times = (r.fwd_ms, r.bwd_ms, 0.0 if r.update_ms is None else r.update_ms)
            if (r.micro_batch < 1 or r.tp < 1 or r.hidden_size < 1 or r.seq_len < 1
                    or not all(math.isfinite(t) and t >= 0 for t in times)):
                raise ValueError(f"{p}: line {line}: micro_batch and tp (and hidden_size, "
                                 "seq_len) must be >= 1 and times finite and >= 0")
    return rows


_DEFAULT: ProfileSet | None = None


def default_profiles() -> ProfileSet:
    """Every profile file shipped in cost_models/profiles/ (loaded once)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ProfileSet.load(sorted(_DIR.glob("*.csv")))
    return _DEFAULT


def _curve_key(r: ProfileRow) -> tuple[str, str, str, int, str]:
    return (_canonical_gpu(r.gpu), normalize_model(r.model), r.layer_kind, r.tp,
            _precision_class(r.precision))


def _shape_key(r: ProfileRow) -> tuple[str, int, int, str, int, str]:
    return (_canonical_gpu(r.gpu), r.hidden_size, r.seq_len, r.layer_kind, r.tp,
            _precision_class(r.precision))


def with_profile_files(paths: Iterable[str | Path], *, shipped: bool = True) -> ProfileSet:
    """The shipped profiles plus the rows of `paths` (e.g. from `hetplan profile`). A file's
    curve (GPU, model, layer kind, TP, precision) replaces the shipped one it matches: newer,
    local measurements win. `shipped=False`: the files alone."""
    user: list[tuple[str, ProfileRow]] = []
    for p in paths:
        rows = read_profile_csv(p)
        for line, r in enumerate(rows, start=2):
            if _catalog_name(r.gpu) is None:
                raise ValueError(f"{p}: line {line}: GPU {r.gpu!r:.40} is not in the catalog, "
                                 "so no plan would use the row (`hetplan gpus` lists the names)")
            user.append((f"{p}: line {line}", r))
    keys = {_curve_key(r) for _, r in user}
    shapes = {_shape_key(r) for _, r in user}
    out = ProfileSet()
    if shipped:
        # A shipped row of the same shape as a user's row stays reachable by its own model's
        # name; for every other model of that shape the user's measurement answers.
        for r in default_profiles().rows:
            if _curve_key(r) not in keys:
                out.add(r, by_shape=_shape_key(r) not in shapes)
    for where, r in user:
        try:
            out.add(r)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc} (a second measurement of the same GPU, layer "
                             "shape, TP, precision and micro-batch); keep one of the rows"
                             ) from None
    return out
