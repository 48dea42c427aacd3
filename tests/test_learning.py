"""Learning test of dreamer_v3_atari.py: on Catch (tests/catch_env.py), a few CPU minutes with a small model must give
returns clearly above a random policy's. Both figures are printed (`pytest -s` shows them) and put in the assertion
message. The run happens in a temporary directory with the repo root on PYTHONPATH, so `ratio` and `tests.catch_env`
import and runs/ lands there.

DREAMER_LEARNING_SEED (default 1) picks the training seed, to check that the test is not flaky; with one OpenMP thread a
seed gives the same figures on every run."""

import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import random_policy_mean, train_catch

pytest.importorskip("tensorboard")

SCRIPT = "dreamer_v3_atari.py"
# A small model, a high replay ratio for the few steps and learning rates higher than the paper's (which are meant for
# 100k steps of Atari): about 870 gradient steps on batches of 8 x 16, 2-3 minutes on 2 shared cores. The entropy bonus
# is raised from 3e-4: with it, the actor often settled on one action while the world model still knew little (after
# about 300 gradient steps) and took the rest of the run to recover.
FLAGS = (
    "--deter-size 64 --hidden-size 64 --cnn-depth 8 --mlp-units 64 --mlp-layers 1 --stoch-size 8 --classes 8 "
    "--batch-size 8 --batch-length 16 --learning-starts 256 --replay-ratio 0.5 --total-timesteps 2000 "
    "--model-lr 2e-3 --actor-lr 1e-3 --critic-lr 1e-3 --actor-entropy 1e-2 --imagination-horizon 10 "
    "--video-every 0 --log-every 200 --eval-episodes 100"
)
LAST_EPISODES = 100  # training episodes averaged at the end of the run
RANDOM_EPISODES = 2000
# Catch's random policy scores about -0.6 (it catches 1 ball in 5), and so does any policy that ignores the ball
# (always left, always stay, ...); one that catches every ball scores +1. A mean over 100 episodes of such an
# untrained policy has a standard error of about 0.08, so these margins are 4 and 6 standard errors.
TRAIN_MARGIN = 0.3
EVAL_MARGIN = 0.5


def test_catch_learns(tmp_path: Path):
    seed = int(os.environ.get("DREAMER_LEARNING_SEED", 1))
    random_mean = random_policy_mean(RANDOM_EPISODES)
    run = train_catch(SCRIPT, FLAGS, tmp_path, seed=seed)
    assert len(run["train"]) >= 2 * LAST_EPISODES, len(run["train"])
    last_mean = float(np.mean(run["train"][-LAST_EPISODES:]))
    figures = (
        f"Catch, seed {seed}: random policy {random_mean:+.3f} over {RANDOM_EPISODES} episodes; trained agent "
        f"{last_mean:+.3f} over its last {LAST_EPISODES} training episodes (needs > {random_mean + TRAIN_MARGIN:+.3f}), "
        f"{run['eval']:+.3f} over the final evaluation's episodes (needs > {random_mean + EVAL_MARGIN:+.3f}); "
        f"{len(run['train'])} training episodes, {run['wall']:.0f} s"
    )
    print(figures)
    assert last_mean > random_mean + TRAIN_MARGIN and run["eval"] > random_mean + EVAL_MARGIN, (
        figures + "\n" + run["stdout"][-2000:]
    )
