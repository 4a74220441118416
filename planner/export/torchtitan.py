"""A torchtitan job TOML for a uniform plan.

Field names as torchtitan's `torchtitan/config/job_config.py` defines them (pytorch/torchtitan,
2025): `[parallelism]` data_parallel_replicate_degree, data_parallel_shard_degree,
tensor_parallel_degree, pipeline_parallel_degree, pipeline_parallel_schedule ("1F1B", "GPipe",
"Interleaved1F1B": torch.distributed.pipelining's schedule names),
pipeline_parallel_microbatch_size, module_fqns_per_model_part (the modules of each model chunk;
chunk j runs on pipeline rank j mod degree, as in hetplan's interleaving);
`[training]` local_batch_size (per DP rank), global_batch_size, seq_len;
`[activation_checkpoint]` mode. Module names are torchtitan's Llama ones (tok_embeddings,
layers.i, norm, output): torchtitan ships no GPT-2/3-style model.
"""

from __future__ import annotations

import json
from typing import Any

from planner.export.uniform import UniformShape

__all__ = ["TORCHTITAN_SCHEDULES", "torchtitan_toml"]

TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}


def _modules(shape: UniformShape) -> list[list[str]]:
    out = []
    last = shape.num_layers - 1
    for start, end in shape.chunk_layers:
        names = ["tok_embeddings"] if start == 0 else []
        names += [f"layers.{i - 1}" for i in range(max(start, 1), min(end, last))]
        names += ["norm", "output"] if end == shape.num_layers else []
        out.append(names)
    return out


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)  # ints, strings and lists of strings are valid TOML this way


def torchtitan_toml(shape: UniformShape, model: dict[str, Any], notes: list[str]) -> str:
    precision = model.get("training", {}).get("precision", "bf16")
    replicate, shard = (1, shape.dp) if shape.zero >= 1 else (shape.dp, 1)
    sections: list[tuple[str, list[tuple[str, Any]]]] = [
        ("job", [("description", f"{model.get('name', 'model')} (exported by hetplan)")]),
        ("training", [("local_batch_size", shape.global_batch_size // shape.dp),
                      ("global_batch_size", shape.global_batch_size),
                      ("seq_len", model["seq_len"]),
                      ("mixed_precision_param",
                       "bfloat16" if precision == "bf16" else "float32")]),
        ("parallelism", [("data_parallel_replicate_degree", replicate),
                         ("data_parallel_shard_degree", shard),
                         ("tensor_parallel_degree", shape.tp),
                         *([("context_parallel_degree", shape.cp)] if shape.cp > 1 else []),
                         ("pipeline_parallel_degree", shape.pp),
                         ("pipeline_parallel_schedule", TORCHTITAN_SCHEDULES[shape.schedule]),
                         ("pipeline_parallel_microbatch_size", shape.micro_batch_size),
                         ("module_fqns_per_model_part", _modules(shape))]),
        ("activation_checkpoint", [("mode", shape.recompute)]
         + ([("selective_ac_option", "op")] if shape.recompute == "selective" else [])),
    ]
    lines = [f"# {n}" for n in notes]
    for name, items in sections:
        lines += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in items]
    return "\n".join(lines) + "\n"
