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
    # A mixture-of-experts model (expert-parallel options, per-shard gradient rings) and a
    # mixed cluster whose programs share options, so kept weights are really reused.
    real = stage_arrays.stage_weights
    for name, where in (("tiny-moe", "dgx-a100"), ("gpt2-amp", "amp-het")):
        model, cluster = load_model(name), load_cluster(where)
        calls = {"n": 0}

        def counted(*args, calls=calls, **kwargs):
            calls["n"] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(stage_arrays, "stage_weights", counted)
        monkeypatch.setattr(stage_arrays, "_WEIGHTS_BYTES", 128 << 20)
        kept, kept_calls = _answer(plan(model, cluster)), calls["n"]
        calls["n"] = 0
        monkeypatch.setattr(stage_arrays, "_WEIGHTS_BYTES", 0)  # nothing kept: all computed
        assert _answer(plan(model, cluster)) == kept
        if name == "gpt2-amp":
            assert kept_calls < calls["n"]  # the store answered some programs


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


def test_plans_built_unvalidated_pass_full_validation() -> None:
    """`build_plan` skips the stages' own checks; every plan the search returns must still pass
    them when re-loaded (MoE ep, heterogeneous classes, interleaved chunks)."""
    from planner.schema import Plan

    for name, where in (("tiny-moe", "dgx-a100"), ("gpt2-amp", "amp-het")):
        result = plan(load_model(name), load_cluster(where), top_k=10)
        for p in result.candidates:
            assert Plan.from_dict(p.to_dict()) == p


def test_trusted_construction_is_model_construct() -> None:
    """`assemble._trusted` sets what pydantic's `model_construct` sets (checked at import,
    `_agrees`); a builder that differs in any slot makes the module use model_construct."""
    from planner.search import assemble

    assert assemble._agrees(assemble._trusted) and assemble._build is assemble._trusted
    assert assemble._agrees(assemble._constructed)

    def no_private(cls, values):  # a pydantic that added or renamed a slot
        m = assemble._trusted(cls, values)
        object.__delattr__(m, "__pydantic_private__")
        return m

    def reordered(cls, values):
        return assemble._trusted(cls, dict(reversed(list(values.items()))))

    def failing(cls, values):
        raise TypeError("internals changed")

    assert not any(assemble._agrees(b) for b in (no_private, reordered, failing))
    for cls, values in assemble._SAMPLES:
        assert cls.model_validate(values) == assemble._trusted(cls, dict(values))


def test_by_score_is_the_sort_by_score_and_repr() -> None:
    """`engine.by_score` orders candidate entries as one sort by (score, repr(contents))
    does, ties on both kept in input order, on entries with many tied scores."""
    import random

    from planner.search.order import by_score

    rng = random.Random(7)
    for _ in range(200):
        entries = [(rng.choice([1.5, 2.0, 2.0, 3.25, float("inf")]),
                    (rng.randrange(3), ("1f1b", rng.randrange(3))), k)
                   for k in range(rng.randrange(0, 30))]
        assert by_score(entries) == sorted(entries, key=lambda r: (r[0], repr(r[1])))


def _first_fit(cluster, requests):
    """Plain first fit, every node's slots scanned (what `_place` must answer)."""
    free = {g: [(name, [True] * group.gpus_per_node) for name in group.node_names()]
            for g, group in enumerate(cluster.groups)}
    out = {}
    for r in sorted(range(len(requests)), key=lambda r: (-requests[r][1], r)):
        g, tp, key = requests[r]
        spot = next(((name, start) for name, slots in free[g]
                     for start in range(0, len(slots), tp) if all(slots[start:start + tp])),
                    None)
        if spot is None:
            return None
        name, start = spot
        slots = dict(free[g])[name]
        slots[start:start + tp] = [False] * tp
        out[key] = (name, tuple(range(start, start + tp)))
    return out


def test_placement_skips_change_no_first_fit() -> None:
    """`assemble._place` passes over full nodes and nodes with too few free GPUs; it must
    place every request where plain first fit does (and fail where it fails)."""
    import random

    from planner.search.assemble import _place

    cluster = load_cluster("bench-64")
    rng = random.Random(3)
    for _ in range(300):
        requests = []
        for k in range(rng.randrange(1, 40)):
            g = rng.randrange(len(cluster.groups))
            gpn = cluster.groups[g].gpus_per_node
            tp = rng.choice([t for t in (1, 2, 4, 8) if gpn % t == 0])
            requests.append((g, tp, (k, 0, g)))
        assert _place(cluster, requests) == _first_fit(cluster, requests)
