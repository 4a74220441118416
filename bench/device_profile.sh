#!/usr/bin/env bash
# Issue 3's GPU check, prepared for a session that is lent a device machine: time hetplan's
# GPT and Llama layers (embedding, one block, head; forward, backward, update; micro-batches
# 1, 2, 4) on that GPU with `hetplan profile`, and bring back one profile CSV per model plus
# the measured-vs-analytic tables.
#
#   here, once:   bash bench/device_profile.sh fetch    # wheels the device image lacks -> .whl/
#   device:       run(command="bash bench/device_profile.sh", carry=[".whl"], timeout_s=540)
#   back here:    copy the CSVs from files_at into cost_models/profiles/, run `make test`,
#                 and report the tables (docs/cost-model.md §6).
#
# The device image has torch, typer, rich, numpy, networkx and PyYAML but not pydantic, which
# model specs need (device/KINDS.md lists the image's packages); `fetch` downloads it and its
# three dependencies as x86-64 / CPython 3.12 wheels. At most 8 files come back from $OUT, so
# this writes one CSV per model, one log and the GPU's description.
#
# Local smoke test (no GPU): PYTHON=.venv/bin/python DEVICE=cpu GPU=H200 MODELS=tiny MBS=1 \
#   OUT=/tmp/device-profile bash bench/device_profile.sh
set -euo pipefail

WHEELS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5"
py=${PYTHON:-python3}

if [ "${1:-}" = fetch ]; then
    "$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl $WHEELS
    exit 0
fi

out=${OUT:-out/device-profile}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/hetplan-site .whl/*.whl
    export PYTHONPATH=/tmp/hetplan-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv || true
  "$py" -c "import torch; print('torch', torch.__version__)"; } >"$out/gpu.txt" 2>&1

for model in ${MODELS:-gpt2-medium gpt-neo-2.7b llama3-8b llama3-70b}; do
    "$py" -m planner.cli.main profile "$model" --micro-batches "${MBS:-1,2,4}" \
        ${DEVICE:+--device "$DEVICE"} ${GPU:+--gpu "$GPU"} --out "$out/$model.csv" \
        2>&1 | tee -a "$out/profile.log"
done
