"""Accuracy of the cost model on shared/data, with the time one estimate takes.

    .venv/bin/python bench/accuracy.py [DATA_DIR]

Prints `hetplan validate --rows` and then times `estimate` on a few plans (after start-up;
`bench/estimate_speed.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.estimate_speed import time_estimates  # noqa: E402
from planner.cli.cmd_validate import validate  # noqa: E402

if __name__ == "__main__":
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    validate(data_dir=data, rows=True, json_out=False)
    time_estimates()
