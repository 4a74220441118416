# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv themselves. torch==2.13.0 is pinned first so pip takes the CPU wheel.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

.PHONY: venv demo test lint bench
venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/hetplan demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# Speed and accuracy figures (printed, never asserted): see docs/search.md and docs/cost-model.md.
bench: $(STAMP)
	$(BIN)/python bench/extract_speed.py
	$(BIN)/python bench/bench_simulate.py
	$(BIN)/python bench/search_speed.py
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/amp_het_probes.py
	$(BIN)/python bench/megatron_weak_scaling.py
