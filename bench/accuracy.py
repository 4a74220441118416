"""Accuracy of the cost model on shared/data, with the time one estimate takes.

    .venv/bin/python bench/accuracy.py [DATA_DIR]

Prints `hetplan validate --rows` and then times `estimate` on a few plans (after start-up).
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.cli.cmd_validate import validate  # noqa: E402
from planner.cluster import load_cluster  # noqa: E402
from planner.costing import estimate, megatron_plan  # noqa: E402
from planner.graph import load_model  # noqa: E402

est_module = importlib.import_module("planner.costing.estimate")


def time_estimates() -> None:
    cases = [("gpt2-amp", "amp-het", dict(tp=1, pp=4, dp=4, micro_batch=2, global_batch=32)),
             ("llama3-70b", "dgx-a100", dict(tp=8, pp=4, dp=2, micro_batch=1, global_batch=64)),
             ("gpt3-175b", "bench-1024", dict(tp=8, pp=16, dp=8, micro_batch=1,
                                              global_batch=1536))]
    for model_name, cluster_name, kw in cases:
        model, cluster = load_model(model_name), load_cluster(cluster_name)
        plan = megatron_plan(model, cluster, **kw)
        estimate(model, cluster, plan)  # start-up: graph tables and caches
        n = 20
        t0 = time.perf_counter()
        for _ in range(n):
            estimate(model, cluster, plan)
        warm = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            est_module._simulate.cache_clear()  # a plan whose pipelines were never simulated
            estimate(model, cluster, plan)
        cold = (time.perf_counter() - t0) / n
        print(f"estimate {model_name} on {cluster_name} {kw}: {cold * 1e3:.2f} ms per call "
              f"(new pipelines), {warm * 1e3:.2f} ms (pipelines simulated before)")


if __name__ == "__main__":
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    validate(data_dir=data, rows=True, json_out=False)
    time_estimates()
