"""Time LayerGraph extraction (meta device, no cache) for the big zoo models.

    .venv/bin/python bench/extract_speed.py [--threads N]

Prints wall time per model; the issue's budget is "llama3-405b well under 30 s on 2 cores".
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from planner.graph import load_model_spec  # noqa: E402
from planner.graph.extract import extract  # noqa: E402

MODELS = ("llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    extract.__wrapped__(load_model_spec("tiny"))  # warm-up: first dispatch-mode use
    print(f"{'model':<14}{'best_s':>9}{'median_s':>10}{'layers':>8}{'op nodes':>10}")
    for name in MODELS:
        spec = load_model_spec(name)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            graph = extract.__wrapped__(spec)
            times.append(time.perf_counter() - start)
        times.sort()
        print(f"{name:<14}{times[0]:>9.3f}{times[len(times) // 2]:>10.3f}"
              f"{len(graph.layers):>8}{graph.op_graph.number_of_nodes():>10}")


if __name__ == "__main__":
    main()
