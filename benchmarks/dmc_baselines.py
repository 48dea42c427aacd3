"""Returns of two policies that ignore the observations on a DMC task, as reference lines for the learning curves: the
zero action (the middle of the action range, the agent's 0 after NormalizeAction) and uniformly random actions in the
action range (what the prefill of dreamer_v2_dmc.py and of the official DreamerV2 plays). The env settings are the
scripts': each action is held for --action-repeat control steps and their rewards are summed, and an episode is the
task's own time limit (1000 control steps, 500 policy steps at action repeat 2). No rendering: the policies do not
look, so dm_control.suite runs on its state observations alone. Seed k draws episode k's initial state (the task's
random generator) and, for the random policy, its actions.

    python benchmarks/dmc_baselines.py --env-id cartpole-balance --seeds 20
"""

import os
import time
from dataclasses import dataclass
from typing import Callable, List, Tuple

import numpy as np
import tyro


@dataclass
class Baselines:
    env_id: str = "cartpole-balance"
    """the DMC task, <domain>-<task> as the scripts' --env-id (cup stands for ball_in_cup)"""
    seeds: int = 20
    """episodes per policy, seeds 1 to N"""
    action_repeat: int = 2
    """control steps per policy step (the scripts' and the paper's DMC value)"""
    policies: Tuple[str, ...] = ("zero", "random")
    """the policies to run: zero, random"""


def load(env_id: str, seed: int):
    os.environ.setdefault("MUJOCO_GL", "egl")  # dm_control picks its renderer once per process, at its first import
    from dm_control import suite

    domain, _, task = env_id.partition("-")
    return suite.load({"cup": "ball_in_cup"}.get(domain, domain), task.replace("-", "_"), task_kwargs={"random": seed})


def make_policy(name: str, low: np.ndarray, high: np.ndarray, seed: int) -> Callable[[], np.ndarray]:
    """The action of each policy step: the middle of the range, or uniform in it."""
    if name == "zero":
        return lambda: (low + high) / 2
    if name == "random":
        rng = np.random.default_rng(seed)
        return lambda: rng.uniform(low, high)
    raise SystemExit(f"dmc_baselines.py: error: unknown policy {name!r} (zero or random)")


def episode_return(env_id: str, policy: str, seed: int, action_repeat: int) -> tuple:
    """(return, policy steps) of one episode: each action held for `action_repeat` control steps."""
    env = load(env_id, seed)
    spec = env.action_spec()
    act = make_policy(policy, spec.minimum.astype(np.float64), spec.maximum.astype(np.float64), seed)
    time_step, total, steps = env.reset(), 0.0, 0
    while not time_step.last():
        action = act()
        for _ in range(action_repeat):
            time_step = env.step(action)
            total += time_step.reward or 0.0
            if time_step.last():
                break
        steps += 1
    return total, steps


def main(args: Baselines) -> dict:
    results = {}
    for policy in args.policies:
        start = time.time()
        runs = [episode_return(args.env_id, policy, seed, args.action_repeat) for seed in range(1, args.seeds + 1)]
        returns: List[float] = [r for r, _ in runs]
        results[policy] = returns
        print(
            f"{args.env_id}, {policy} action, action repeat {args.action_repeat}, {args.seeds} seeds "
            f"({runs[0][1]} policy steps per episode, {time.time() - start:.1f} s): min {min(returns):.1f}, "
            f"max {max(returns):.1f}, mean {np.mean(returns):.1f} (std {np.std(returns):.1f})"
        )
        print("  per seed: " + ", ".join(f"{r:.1f}" for r in returns))
    return results


if __name__ == "__main__":
    main(tyro.cli(Baselines))
