#!/bin/bash
# The GPU figures of docs/speed.md and docs/results.md, on a machine with a CUDA GPU and PyTorch (not yet run on a GPU):
#
#     bash benchmarks/gpu_figures.sh [OUT_DIR]              # default: $OUT, else gpu_figures/; parts 1-3
#     PARTS=dmc bash benchmarks/gpu_figures.sh [OUT_DIR]    # part 4 alone: one command of its own, about 9 minutes
#
# 1. OUT_DIR/speed.md: benchmarks/speed.py on the GPU, every script, fp32 and bf16 interleaved, 10 timed gradient steps
#    after 3 untimed ones (the env-alone column is left out: the envs run on the CPU, and it is measured there).
# 2. OUT_DIR/speed_compile.md: the same for DreamerV3 with --compile (torch.compile of the encoder, decoder, RSSM steps).
# 3. OUT_DIR/learning.txt: the Catch learning tests of DreamerV3 and DreamerV2 (their flags and marks, seed 1), trained
#    on the GPU. Parts 1-3 are estimated at under 10 minutes on an H200.
# 4. OUT_DIR/dmc.txt and OUT_DIR/dmc_events: dreamer_v2_dmc.py at the paper's size and settings on cartpole-balance,
#    seed 1, for DMC_STEPS policy steps (default 50,000 = 100k frames, the reduced CPU runs' length; docs/results.md)
#    or until DMC_SECONDS (default 540) have passed, so that it fits the device's 10-minute command limit (the run
#    stops cleanly on timeout's SIGTERM, at whatever frame count it reached: its evaluations every 10k frames up to
#    there are the figures, beside the official 281-330 at 30k, 484-683 at 60k, 797-937 at 100k); its console output
#    and its TensorBoard event file. It needs dm_control and mujoco (below).
# PARTS (default "speed learning") picks the parts: any of speed (1, 2), learning (3) and dmc (4).
# Every part writes its output as it goes, so a run stopped early keeps what it finished. Python packages the scripts
# need that a bare GPU machine may lack (tyro, gymnasium, ale-py and their own needs) are installed from the wheels in
# .whl/ when that folder exists; for a machine without internet and Python 3.12, fetch them where PyPI is reachable:
#
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl \
#         tyro docstring-parser typeguard typing-extensions gymnasium farama-notifications ale-py
#
# and for part 4 also (the suite's tasks do not need dm_control's 39 MB of locomotion assets, which would push the
# wheels over a 64 MiB transfer limit; --platform manylinux_2_27_x86_64 for mujoco):
#
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#         --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 -d .whl \
#         dm-control==1.0.50 "mujoco>=3,<4" dm-env dm-tree glfw labmaze pyopengl
#     zip -q -d .whl/dm_control-*.whl 'dm_control/locomotion/*'
#
# DEVICE (default cuda) picks the device and SPEED_FLAGS adds flags to speed.py; on a machine without a GPU,
# `DEVICE=cpu SPEED_FLAGS=--tiny bash benchmarks/gpu_figures.sh` checks that parts 1-3 run (about 10 CPU minutes), and
# `DEVICE=cpu PARTS=dmc DMC_STEPS=1200 DMC_FLAGS="--cnn-depth 4 --mlp-units 32" bash benchmarks/gpu_figures.sh` part 4.
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

parts=" ${PARTS:-speed learning} "

if [[ $parts == *" speed "* ]]; then
    python3 benchmarks/speed.py --device "$device" --warmup 3 --steps 10 --act-steps 200 --no-env ${SPEED_FLAGS:-} 2>&1 \
        | tee "$out/speed.md"
    python3 benchmarks/speed.py --device "$device" --scripts v3 --compile --warmup 3 --steps 10 --act-steps 200 --no-env \
        ${SPEED_FLAGS:-} 2>&1 | tee "$out/speed_compile.md"
fi

if [[ $parts == *" dmc "* ]]; then
    # the paper's DMC settings and sizes (the script's defaults), evaluated every 5,000 policy steps (10k frames) as the
    # reduced CPU runs of docs/results.md; runs/ goes to a scratch folder, its event file to OUT_DIR
    repo=$PWD dmc_dir=$(mktemp -d)
    (cd "$dmc_dir" && MUJOCO_GL=${MUJOCO_GL:-egl} timeout "${DMC_SECONDS:-540}" python3 "$repo/dreamer_v2_dmc.py" \
        --env-id cartpole-balance --seed 1 --total-timesteps "${DMC_STEPS:-50000}" --eval-every 5000 --eval-episodes 1 \
        --checkpoint-every 5000 --log-every 500 $([ "$device" = cpu ] && echo --no-cuda) ${DMC_FLAGS:-}) 2>&1 \
        | grep -v "^WARNING\|Warning" | tee "$out/dmc.txt"
    cp "$dmc_dir"/runs/*/events.out.tfevents.* "$out/dmc_events" 2>/dev/null || echo "no event file" | tee -a "$out/dmc.txt"
fi

[[ $parts == *" learning "* ]] || exit 0
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
