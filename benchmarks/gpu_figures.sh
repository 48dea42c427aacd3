#!/bin/bash
# The GPU figures of docs/speed.md in one command, on a machine with a CUDA GPU and PyTorch (not yet run on a GPU;
# estimated at under 10 minutes on an H200):
#
#     bash benchmarks/gpu_figures.sh [OUT_DIR]       # default: $OUT, else gpu_figures/
#
# 1. OUT_DIR/speed.md: benchmarks/speed.py on the GPU, every script, fp32 and bf16 interleaved, 10 timed gradient steps
#    after 3 untimed ones (the env-alone column is left out: the envs run on the CPU, and it is measured there).
# 2. OUT_DIR/speed_compile.md: the same for DreamerV3 with --compile (torch.compile of the encoder, decoder, RSSM steps).
# 3. OUT_DIR/learning.txt: the Catch learning tests of DreamerV3 and DreamerV2 (their flags and marks, seed 1), trained
#    on the GPU.
# Every part writes its output as it goes, so a run stopped early keeps what it finished. Python packages the scripts
# need that a bare GPU machine may lack (tyro, gymnasium, ale-py and their own needs) are installed from the wheels in
# .whl/ when that folder exists; for a machine without internet and Python 3.12, fetch them where PyPI is reachable:
#
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl \
#         tyro docstring-parser typeguard typing-extensions gymnasium farama-notifications ale-py
#
# DEVICE (default cuda) picks the device and SPEED_FLAGS adds flags to speed.py; on a machine without a GPU,
# `DEVICE=cpu SPEED_FLAGS=--tiny bash benchmarks/gpu_figures.sh` checks that the script runs (about 10 CPU minutes).
set -u -o pipefail
out=$(realpath -m "${1:-${OUT:-gpu_figures}}")
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
device=${DEVICE:-cuda}
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no nvidia-smi") > "$out/gpu.txt" 2>&1

python3 benchmarks/speed.py --device "$device" --warmup 3 --steps 10 --act-steps 200 --no-env ${SPEED_FLAGS:-} 2>&1 \
    | tee "$out/speed.md"
python3 benchmarks/speed.py --device "$device" --scripts v3 --compile --warmup 3 --steps 10 --act-steps 200 --no-env \
    ${SPEED_FLAGS:-} 2>&1 | tee "$out/speed_compile.md"

python3 - "$device" 2>&1 <<'PY' | tee "$out/learning.txt"
import sys
import tempfile
from pathlib import Path

import numpy as np

from tests import test_learning, test_learning_dreamer_v2
from tests.helpers import random_policy_mean, train_catch

random_mean = random_policy_mean(2000)
for test in (test_learning, test_learning_dreamer_v2):
    run = train_catch(test.SCRIPT, test.FLAGS, Path(tempfile.mkdtemp()), seed=1, cuda=sys.argv[1].startswith("cuda"))
    last = float(np.mean(run["train"][-test.LAST_EPISODES :]))
    passed = last > random_mean + test.TRAIN_MARGIN and run["eval"] > random_mean + test.EVAL_MARGIN
    print(
        f"{test.SCRIPT} on Catch, seed 1, on {sys.argv[1]}: last {test.LAST_EPISODES} training episodes {last:+.3f}, "
        f"final evaluation {run['eval']:+.3f} (random {random_mean:+.3f}; marks {random_mean + test.TRAIN_MARGIN:+.3f}"
        f" / {random_mean + test.EVAL_MARGIN:+.3f}: {'pass' if passed else 'FAIL'}), {run['wall']:.0f} s",
        flush=True,
    )
PY
