"""`--tp` that a layer cannot take names the dimension that fails: a block's heads / KV heads /
FFN width (tp must divide them), or an embedding's vocabulary (tp at most its rows)."""

from __future__ import annotations

import pytest

from planner.cluster import load_cluster
from planner.costing.megatron import megatron_plan
from planner.errors import HetplanError
from planner.graph import ModelSpec, load_model, load_model_spec


def _tiny(**changes: int):
    data = load_model_spec("tiny").model_dump(mode="json")
    data.update(changes)
    return load_model(ModelSpec.model_validate(data))


def _refusal(model, tp: int) -> str:
    with pytest.raises(HetplanError) as err:
        megatron_plan(model, load_cluster("amp-t4"), tp=tp, pp=1, dp=1, micro_batch=1,
                      global_batch=8)
    return str(err.value)


def test_a_vocabulary_smaller_than_tp_is_named_as_the_vocabulary() -> None:
    # tiny's blocks split at tp 2 (4 heads, FFN 256); only its 1-row vocabulary cannot.
    msg = _refusal(_tiny(vocab_size=1), 2)
    assert "layer embed's vocabulary of 1 rows" in msg and "--tp at most 1" in msg
    assert "heads" not in msg and "FFN" not in msg


def test_heads_that_tp_does_not_divide_are_named_with_their_sizes() -> None:
    msg = _refusal(_tiny(), 3)
    assert "does not divide layer layers.0's heads, KV heads and FFN width (4 / 4 / 256" in msg
    assert "vocabulary" not in msg
