"""Learning tests of dreamer_v2_atari.py and dreamer_v3_atari.py on Dodge (tests/dodge_env.py), a second small pixel
game unlike Catch: each script with exactly the flags of its Catch learning test (tests/test_learning_dreamer_v2.py:
3,000 policy steps; tests/test_learning.py: 2,000), number of steps included, to show that neither script's settings
are tuned to Catch. The margins are those of the Catch tests. Both figures are printed (`pytest -s -o addopts=""` shows
them; pyproject's `-n 2` hides them) and put in the assertion message; the run happens in a temporary directory with the
repo root on PYTHONPATH.

Seed: DREAMER_LEARNING_SEED (default 1) picks the training seed, to check that the test is not flaky."""

import os
from pathlib import Path

import numpy as np
import pytest

from tests import test_learning, test_learning_dreamer_v2
from tests.helpers import random_policy_mean, train_catch

pytest.importorskip("tensorboard")

DODGE = "tests.dodge_env:Dodge-v0"
LAST_EPISODES = 100  # training episodes averaged at the end of the run
RANDOM_EPISODES = 2000
# Dodge's random policy scores about -0.6 (it survives 1 game in 5), and so does staying put; one that dodges every rock
# scores +1. As on Catch, a mean over 100 episodes of such an untrained policy has a standard error of about 0.08, so
# these margins are 4 and 6 standard errors.
TRAIN_MARGIN = 0.3
EVAL_MARGIN = 0.5


@pytest.mark.parametrize(
    "script, flags",
    [
        ("dreamer_v2_atari.py", test_learning_dreamer_v2.FLAGS),
        ("dreamer_v3_atari.py", test_learning.FLAGS),
    ],
    ids=["v2", "v3"],
)
def test_dodge_learns(script: str, flags: str, tmp_path: Path):
    seed = int(os.environ.get("DREAMER_LEARNING_SEED", 1))
    random_mean = random_policy_mean(RANDOM_EPISODES, env_id=DODGE)
    run = train_catch(script, flags, tmp_path, seed=seed, env_id=DODGE)
    assert len(run["train"]) >= 2 * LAST_EPISODES, len(run["train"])
    last_mean = float(np.mean(run["train"][-LAST_EPISODES:]))
    figures = (
        f"{script} on Dodge, seed {seed}: random policy {random_mean:+.3f} over {RANDOM_EPISODES} episodes; trained "
        f"agent {last_mean:+.3f} over its last {LAST_EPISODES} training episodes (needs > "
        f"{random_mean + TRAIN_MARGIN:+.3f}), {run['eval']:+.3f} over the final evaluation's episodes (needs > "
        f"{random_mean + EVAL_MARGIN:+.3f}); {len(run['train'])} training episodes, {run['wall']:.0f} s"
    )
    print(figures)
    assert last_mean > random_mean + TRAIN_MARGIN and run["eval"] > random_mean + EVAL_MARGIN, (
        figures + "\n" + run["stdout"][-2000:]
    )
