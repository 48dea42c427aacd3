"""Learning test of dreamer_v3_atari.py: on Catch (tests/catch_env.py), a few CPU minutes with a small model must give
returns clearly above a random policy's. Both figures are printed (`pytest -s` shows them) and put in the assertion
message. The run happens in a temporary directory with the repo root on PYTHONPATH, so `ratio` and `tests.catch_env`
import and runs/ lands there.

DREAMER_LEARNING_SEED (default 1) picks the training seed, to check that the test is not flaky; with one OpenMP thread a
seed gives the same figures on every run."""

import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tensorboard")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(ROOT / "dreamer_v3_atari.py")
ENV_ID = "tests.catch_env:Catch-v0"
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


def random_policy_mean(episodes: int = RANDOM_EPISODES, seed: int = 0) -> float:
    import tests.catch_env  # noqa: F401  registers Catch-v0

    env, rng, returns = gym.make("Catch-v0"), np.random.default_rng(seed), []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def train_catch(cwd: Path, extra_flags: str = "", seed: int = 1) -> dict:
    """Run the script on Catch in cwd; returns the training returns, the final evaluation's mean and the wall time."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    # One OpenMP thread: the networks are tiny, and on 2 shared cores a 2-thread pool that spins against other
    # processes made each small op 10x slower.
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    command = [sys.executable, SCRIPT, "--env-id", ENV_ID, "--seed", str(seed), "--no-cuda", *FLAGS.split(),
               *extra_flags.split()]  # fmt: skip
    start = time.time()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.time() - start
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    run_dirs = glob.glob(str(cwd / "runs" / "*"))
    assert len(run_dirs) == 1, run_dirs
    ea = EventAccumulator(run_dirs[0], size_guidance={"scalars": 0})
    ea.Reload()
    train = [e.value for e in ea.Scalars("charts/episodic_return")]
    evals = [e.value for e in ea.Scalars("eval/episodic_return")]
    return dict(train=train, eval=evals[-1], wall=wall, stdout=result.stdout)


def test_catch_learns(tmp_path: Path):
    seed = int(os.environ.get("DREAMER_LEARNING_SEED", 1))
    random_mean = random_policy_mean()
    run = train_catch(tmp_path, seed=seed)
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
