"""Environment throughput of dreamer_v2_dmc.py: rendered policy steps per second of its DMC envs, without the agent.

Builds the envs exactly as the training script does (make_env: the DMC wrapper, action repeat, 64x64 rendering of the last
sub-step, NormalizeAction, RecordEpisodeStatistics) in the same vector env (SyncVectorEnv for one env, AsyncVectorEnv with
"spawn" for several), steps them with uniformly random actions and reports policy steps per second summed over the envs
(frames per second = that x action repeat). Episode resets happen as in training.

    python benchmarks/env_throughput_dmc.py --num-envs 1 4
    python benchmarks/env_throughput_dmc.py --env-id cheetah-run --steps 2000
"""

import os
import sys
import time
from dataclasses import dataclass, field
from typing import List

import gymnasium as gym
import numpy as np
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dreamer_v2_dmc as v2dmc  # noqa: E402


@dataclass
class Bench:
    env_id: str = "walker-walk"
    """the DMC task"""
    num_envs: List[int] = field(default_factory=lambda: [1, 4])
    """numbers of envs to time, one after the other"""
    steps: int = 1000
    """timed policy steps per env"""
    warmup: int = 50
    """untimed policy steps per env first (GL contexts, caches)"""
    action_repeat: int = 2
    """control steps per policy step"""


def throughput(bench: Bench, num_envs: int) -> float:
    fns = [v2dmc.make_env(bench.env_id, i, i, False, "", bench.action_repeat) for i in range(num_envs)]
    envs = gym.vector.AsyncVectorEnv(fns, context="spawn") if num_envs > 1 else gym.vector.SyncVectorEnv(fns)
    envs.reset(seed=list(range(num_envs)))
    rng = np.random.default_rng(0)
    shape = (num_envs, *envs.single_action_space.shape)
    for _ in range(bench.warmup):
        envs.step(rng.uniform(-1, 1, shape).astype(np.float32))
    start = time.perf_counter()
    for _ in range(bench.steps):
        envs.step(rng.uniform(-1, 1, shape).astype(np.float32))
    seconds = time.perf_counter() - start
    envs.close()
    return num_envs * bench.steps / seconds


if __name__ == "__main__":
    bench = tyro.cli(Bench)
    v2dmc.default_renderer()
    print(f"{bench.env_id}, action repeat {bench.action_repeat}, MUJOCO_GL={os.environ['MUJOCO_GL']}, {os.cpu_count()} CPUs")
    for n in bench.num_envs:
        sps = throughput(bench, n)
        print(f"{n} env(s): {sps:.1f} policy steps/s ({sps * bench.action_repeat:.1f} frames/s)", flush=True)
