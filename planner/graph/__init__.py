"""The model as a chain of measured layers (LayerGraph), from a spec or a user's module.

    from planner.graph import load_model, from_module
    model = load_model("llama3-70b")          # bundled name, YAML, config.json or ModelSpec
    model.layers[1].fwd_flops                 # per sequence of model.seq_len tokens
"""

from planner.graph.extract import dtype_bytes, extract
from planner.graph.layers import Layer, LayerGraph
from planner.graph.load_spec import load_model_spec, zoo_names
from planner.graph.model import Model, from_module, load_model
from planner.graph.spec import ModelSpec, TrainingSpec

__all__ = [
    "Layer",
    "LayerGraph",
    "Model",
    "ModelSpec",
    "TrainingSpec",
    "dtype_bytes",
    "extract",
    "from_module",
    "load_model",
    "load_model_spec",
    "zoo_names",
]
