"""A user's nn.Module inside a plan file: its measured layer table and how to rebuild it.

A module has no spec to embed, so a plan made from `planner.from_module` embeds

    "model": {"source": "module", "name": ..., "precision": "fp32",
              "factory": "mypkg.models:make_model",      # optional
              "graph": {... LayerGraph.to_dict(): seq_len, dtype_bytes, every layer ...}}

`estimate`, `simulate` and the plan validator price the embedded layer table as it was
measured (no module needed). `dryrun` and `launch` run the module itself, so they need the
`factory`: an importable `module:function` that returns the same module (same weights on
every call: seed it) and that the nodes can import.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

from planner.errors import SpecError
from planner.graph.layers import Layer, LayerGraph
from planner.limits import MAX_LAYERS, MAX_SEQ_LEN, limit_text

__all__ = ["MODULE_SOURCE", "graph_of", "is_module_model", "load_factory", "module_model"]

MODULE_SOURCE = "module"
_PRECISIONS = {"bf16": 2, "fp16": 2, "fp32": 4}
_KEYS = {"source", "name", "precision", "factory", "graph"}


def is_module_model(data: Any) -> bool:
    return isinstance(data, dict) and data.get("source") == MODULE_SOURCE


def module_model(graph: LayerGraph, precision: str, factory: str | None) -> dict[str, Any]:
    """The plan's `model` entry for a module measured into `graph`."""
    out: dict[str, Any] = {"source": MODULE_SOURCE, "name": graph.name, "precision": precision}
    if factory is not None:
        out["factory"] = factory
    out["graph"] = graph.to_dict()
    return out


def graph_of(data: dict[str, Any], where: str = "plan: model") -> tuple[LayerGraph, str]:
    """(graph, precision) of an embedded module model, every field checked (one line)."""
    extra = sorted(set(data) - _KEYS)
    if extra:
        raise SpecError(where, extra[0], f"unknown field of a module model (allowed: "
                        f"{', '.join(sorted(_KEYS))})")
    precision = data.get("precision")
    if precision not in _PRECISIONS:
        raise SpecError(where, "precision", f"{precision!r:.40}; use bf16, fp16 or fp32")
    factory = data.get("factory")
    if factory is not None:
        _split_factory(factory, where)
    raw = data.get("graph")
    if not isinstance(raw, dict):
        raise SpecError(where, "graph", "missing; a module plan embeds its measured layer table")
    for key, kind in (("name", str), ("seq_len", int), ("dtype_bytes", int), ("layers", list)):
        value = raw.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (
                kind is int and value <= 0):
            want = "a positive integer" if kind is int else f"a {kind.__name__}"
            raise SpecError(where, f"graph.{key}", f"expected {want}, got {value!r:.40}")
    if raw["dtype_bytes"] != _PRECISIONS[precision]:
        raise SpecError(where, "graph.dtype_bytes", f"{raw['dtype_bytes']} but precision "
                        f"{precision} has {_PRECISIONS[precision]}-byte elements")
    if raw["seq_len"] > MAX_SEQ_LEN or len(raw["layers"]) > MAX_LAYERS + 2:
        field = "seq_len" if raw["seq_len"] > MAX_SEQ_LEN else "layers"
        raise SpecError(where, f"graph.{field}", f"above hetplan's limit "
                        f"({limit_text(MAX_SEQ_LEN)} tokens, {limit_text(MAX_LAYERS)} blocks); "
                        "check the plan file")
    if len(raw["layers"]) < 3:
        raise SpecError(where, "graph.layers", "needs the embedding, at least one block and "
                        "the head")
    layers = [_layer(d, i, len(raw["layers"]), f"{where}: graph.layers.{i}")
              for i, d in enumerate(raw["layers"])]
    return LayerGraph(name=raw["name"], seq_len=raw["seq_len"], dtype_bytes=raw["dtype_bytes"],
                      layers=tuple(layers)), precision


def _layer(d: Any, index: int, n: int, where: str) -> Layer:
    if not isinstance(d, dict):
        raise SpecError(where, None, "expected a mapping of layer fields")
    fields = {k: v for k, v in d.items() if k != "bwd_flops"}
    try:
        layer = Layer.from_dict(fields)
    except TypeError as exc:
        raise SpecError(where, None, f"{exc}".replace("__init__() ", "")) from None
    if layer.index != index:
        raise SpecError(where, "index", f"{layer.index}; layers must be numbered 0..{n - 1}")
    for name in ("params", "max_tp", "tp_allreduces_fwd", "matmul_dim", "vocab_size",
                 "tied_params", "tied_to", "gemm_params"):
        value = getattr(layer, name)
        if name == "gemm_params" and value is None:  # graphs written before the field
            continue
        low = -1 if name == "tied_to" else (1 if name == "max_tp" else 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise SpecError(where, name, f"expected an integer >= {low}, got {value!r:.40}")
    for name in ("fwd_flops", "bwd_act_flops", "bwd_weight_flops", "fwd_matmul_flops",
                 "fwd_memory_bytes", "activation_bytes", "activation_bytes_selective",
                 "activation_bytes_full", "output_bytes", "tp_allreduce_bytes",
                 "fwd_attention_flops"):
        value = getattr(layer, name)
        if (not isinstance(value, int | float) or isinstance(value, bool)
                or not math.isfinite(value) or value < 0):
            raise SpecError(where, name, f"expected a finite number >= 0, got {value!r:.40}")
    if not all(isinstance(x, int) and x > 0 for x in layer.tp_dims):
        raise SpecError(where, "tp_dims", "expected positive integers")
    if layer.kind not in ("embedding", "block", "head", "other"):
        raise SpecError(where, "kind", f"{layer.kind!r}; use embedding, block, head or other")
    return layer


def _split_factory(ref: Any, where: str) -> tuple[str, str]:
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise SpecError(where, "factory", f"{ref!r:.60}; write it as 'package.module:function'")
    module, attr = ref.split(":")
    return module, attr


def load_factory(data: dict[str, Any], where: str = "plan: model") -> Callable[[], Any]:
    """The module factory a module plan names, imported; one line if it cannot be."""
    ref = data.get("factory")
    if ref is None:
        raise SpecError(where, "factory", "missing: this plan was made from an nn.Module "
                        "without a factory, so it can be estimated but not run; pass "
                        "factory='package.module:function' to planner.from_module")
    module, attr = _split_factory(ref, where)
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise SpecError(where, "factory", f"cannot import {ref} ({exc}); make the package "
                        "importable (PYTHONPATH) on this machine") from None
    if not callable(fn):
        raise SpecError(where, "factory", f"{ref} is not callable")
    return fn
