"""The search's speed devices change no answer and leave no trace: the stage weights kept
across programs (`stage_arrays._WEIGHTS_BYTES`) against recomputing them every program, and the
collector freeze around `plan` (the caller's own freeze is kept)."""

from __future__ import annotations

import gc

from planner.cluster import load_cluster
from planner.graph import load_model
from planner.search import plan, stage_arrays


def _answer(result) -> tuple:
    return ([p.model_dump(mode="json") for p in result.candidates],
            [repr(e) for e in result.estimates], result.stats.to_dict())


def test_kept_stage_weights_give_the_recomputed_answer(monkeypatch) -> None:
    # A mixture-of-experts model: expert-parallel options and their per-shard gradient rings.
    model, cluster = load_model("tiny-moe"), load_cluster("dgx-a100")
    kept = _answer(plan(model, cluster))
    monkeypatch.setattr(stage_arrays, "_WEIGHTS_BYTES", 0)  # nothing kept: every program computes
    assert _answer(plan(model, cluster)) == kept


def test_plan_leaves_the_collector_as_it_found_it() -> None:
    model, cluster = load_model("tiny-moe"), load_cluster("dgx-a100")
    before = gc.get_freeze_count()
    plan(model, cluster)
    assert gc.get_freeze_count() == before and gc.isenabled()
    gc.freeze()
    try:
        plan(model, cluster)
        # The caller's freeze is not undone (its count only falls by objects freed meanwhile).
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
