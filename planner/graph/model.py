"""`Model`: a spec (when there is one) and its measured LayerGraph, as the API hands it out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from torch import nn

from planner.errors import HetplanError
from planner.graph.embedded import load_factory, module_model
from planner.graph.extract import extract, torch_dtype
from planner.graph.layers import Layer, LayerGraph
from planner.graph.load_spec import load_model_spec
from planner.graph.seq_len import Notice, check_seq_len
from planner.graph.spec import ModelSpec, Precision
from planner.graph.user_module import graph_from_module

__all__ = ["Model", "from_module", "load_model"]

_PRECISION_OF = {torch_dtype(p): p for p in get_args(Precision)}


@dataclass(frozen=True, slots=True)
class Model:
    """A model ready to plan: its spec (None for a user's module) and its LayerGraph."""

    spec: ModelSpec | None
    graph: LayerGraph
    precision: str
    """Training precision: bf16 | fp16 | fp32."""
    factory: str | None = None
    """A user's module: the `package.module:function` that rebuilds it (dryrun, launch)."""

    def plan_model(self) -> dict[str, Any]:
        """What a plan embeds: the spec, or for a user's module its measured layer table and
        factory (`planner.graph.embedded`)."""
        if self.spec is not None:
            return self.spec.to_dict()
        return module_model(self.graph, self.precision, self.factory)

    @property
    def layers(self) -> tuple[Layer, ...]:
        return self.graph.layers

    @property
    def name(self) -> str:
        return self.graph.name

    @property
    def seq_len(self) -> int:
        return self.graph.seq_len


def load_model(path_or_name_or_spec: str | Path | ModelSpec | Model, *,
               seq_len: int | None = None, notice: Notice | None = None) -> Model:
    """A Model from a bundled name, a YAML / config.json path, a ModelSpec, or a Model.

    `seq_len`: the training sequence length in tokens, overriding the file's or spec's (a
    config.json without it gets a default and a notice, see `load_model_spec`). A user's
    module keeps the length it was measured at; asking for another is an error.
    """
    if seq_len is not None:
        check_seq_len(seq_len)
    source = path_or_name_or_spec
    if isinstance(source, Model):
        if seq_len is None or seq_len == source.seq_len:
            return source
        if source.spec is None:
            raise HetplanError(f"model {source.name} was measured from a module at seq_len "
                               f"{source.seq_len}; measure it again with an example input of "
                               f"{seq_len} tokens (from_module) to plan that length")
        source = source.spec
    if isinstance(source, ModelSpec):
        spec = source if seq_len is None else source.replace(seq_len=seq_len)
    else:
        spec = load_model_spec(source, seq_len=seq_len, notice=notice)
    return Model(spec=spec, graph=extract(spec), precision=spec.training.precision)


def from_module(module: nn.Module, example_input: Any, *, name: str | None = None,
                precision: str | None = None, factory: str | None = None) -> Model:
    """A Model measured from a user's module whose blocks sit in an nn.ModuleList.

    `example_input` is one batch (a tensor, or a tuple of positional arguments) of shape
    (batch, seq_len, ...). The module is measured in its own dtype, which gives the
    precision; passing a different `precision` is an error (build it in that dtype).
    `factory` ("package.module:function", returning the same module with the same weights
    on every call) goes into plans so `hetplan dryrun` and `launch` can build the module;
    without it a plan can be saved, estimated and simulated but not run.
    """
    if factory is not None:
        load_factory({"factory": factory}, where="from_module")
    dtype = next(module.parameters()).dtype if any(True for _ in module.parameters()) else None
    own = _PRECISION_OF.get(dtype)
    if own is None:
        raise HetplanError(f"{type(module).__name__}'s parameters are {dtype}; hetplan plans "
                           "bf16, fp16 or fp32 models")
    if precision is not None and precision != own:
        raise HetplanError(f"{type(module).__name__}'s parameters are {dtype} but precision is "
                           f"{precision!r}; build the module in that precision or pass "
                           f"precision={own!r}")
    graph = graph_from_module(module, example_input, name=name or type(module).__name__)
    return Model(spec=None, graph=graph, precision=own, factory=factory)
