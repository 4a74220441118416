"""Search speed: how long `planner.plan` takes on the two benchmark clusters.

    .venv/bin/python bench/search_speed.py

Targets (issue 4): 64 GPUs of 3 types with GPT-Neo 2.7B (34 layers) in <= 1 s; 1024 GPUs of
4 types (H100, A100, V100, L40S) with GPT-3 175B in <= 30 s. Model extraction is timed apart
(the search is what the targets are about). Prints one line per case; the CPU time is the
steadier figure on a machine others share.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.cluster import load_cluster  # noqa: E402
from planner.graph import load_model  # noqa: E402
from planner.search import plan  # noqa: E402

CASES = (
    ("gpt-neo-2.7b", "bench-64", 1.0),
    ("gpt3-175b", "bench-1024", 30.0),
)


def main() -> None:
    for model_name, cluster_name, target_s in CASES:
        t0 = time.perf_counter()
        model = load_model(model_name)
        cluster = load_cluster(cluster_name)
        load_s = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(model, cluster)
        search_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        est, st = result.estimates[0], result.stats
        best = result.best
        print(f"{model_name} on {cluster_name} ({cluster.world_size} GPUs): "
              f"search {search_s:.2f} s (target {target_s:.0f} s; {cpu_s:.2f} s CPU), "
              f"model load {load_s:.2f} s; "
              f"{st.shapes} shapes, "
              f"{st.shapes_pruned} pruned, {st.programs} programs, {st.costed} re-costed; best "
              f"{est.iteration_time_s:.3f} s/iter, {est.tokens_per_s:,.0f} tokens/s, "
              f"MFU {100 * est.mfu:.1f} %, {len(best.pipelines)} pipelines on "
              f"{len(best.ranks)} GPUs, micro-batch {best.micro_batch_size}")


if __name__ == "__main__":
    main()
