"""Our own GPT and Llama as torch modules, cut into a chain (embed, blocks, head).

The extractor measures them on the meta device; the runtime trains them under
pipeline / tensor parallelism.
"""

from planner.models.attention import Attention, AttentionImpl, CoreAttention
from planner.models.build import build_element, build_model, element_seed, reset_parameters_for
from planner.models.chain import Block, ChainModel, Embedding, Head, loss_fn

__all__ = [
    "Attention",
    "AttentionImpl",
    "Block",
    "ChainModel",
    "CoreAttention",
    "Embedding",
    "Head",
    "build_element",
    "build_model",
    "element_seed",
    "loss_fn",
    "reset_parameters_for",
]
