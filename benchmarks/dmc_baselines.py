"""Returns of two policies that ignore the observations on a DMC task, as reference lines for the learning curves: the
zero action (the middle of the action range, the agent's 0 after NormalizeAction) and uniformly random actions in the
action range (what the prefill of dreamer_v2_dmc.py and of the official DreamerV2 plays). The env settings are the
scripts': each action is held for --action-repeat control steps and their rewards are summed, and an episode is the
task's own time limit (1000 control steps, 500 policy steps at action repeat 2). No rendering: the policies do not
look, so dm_control.suite runs on its state observations alone. Seed k draws episode k's initial state (the task's
random generator) and, for the random policy, its actions.

    python benchmarks/dmc_baselines.py --env-id cartpole-balance --seeds 20

--frames OUT.npz also renders what the agent sees (64 x 64, camera 0: the scripts' camera but for quadruped) along
seed 1's random episode, every 20 policy steps over the first 100, and saves them with the MuJoCo and dm_control
versions; run it in two venvs and --compare-frames OTHER.npz prints how far the two renderings are apart and draws them
one above the other (OUT.png beside OUT.npz). With the same versions the frames are identical; a different MuJoCo
changes the shading.

    python benchmarks/dmc_baselines.py --seeds 20 --frames old.npz                       # in a venv with an old MuJoCo
    python benchmarks/dmc_baselines.py --seeds 20 --frames new.npz --compare-frames old.npz
"""

import os
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

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
    frames: Optional[str] = None
    """OUT.npz: save the rendered observations of seed 1's random episode (every 20 policy steps, the first 100)"""
    compare_frames: Optional[str] = None
    """OTHER.npz: the --frames of another install, to compare with this one's (needs --frames)"""


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


def render_frames(env_id: str, action_repeat: int, every: int = 20, count: int = 5) -> np.ndarray:
    """What the agent sees along seed 1's random episode: camera 0 at 64 x 64, every `every` policy steps."""
    env = load(env_id, 1)
    spec = env.action_spec()
    act = make_policy("random", spec.minimum.astype(np.float64), spec.maximum.astype(np.float64), 1)
    env.reset()
    frames = []
    for step in range(every * count):
        if step % every == 0:
            frames.append(env.physics.render(64, 64, camera_id=0))
        action = act()
        for _ in range(action_repeat):
            env.step(action)
    return np.stack(frames)


def versions() -> str:
    from importlib.metadata import version

    return f"MuJoCo {version('mujoco')}, dm_control {version('dm_control')}"


def compare_frames(path: str, other: str):
    """Print how far two --frames files are apart, and draw them one above the other (the .png beside `path`)."""
    mine, theirs = np.load(path), np.load(other)
    a, b = mine["frames"].astype(int), theirs["frames"].astype(int)
    if a.shape != b.shape:
        raise SystemExit(f"dmc_baselines.py: error: --compare-frames {other}: frames {b.shape}, this run's {a.shape}")
    gap = np.abs(a - b)
    print(
        f"frames of {mine['versions']} against {theirs['versions']}: max difference {gap.max()} of 255, "
        f"mean {gap.mean():.2f}, {(gap.max(-1) > 0).mean():.0%} of the pixels differ"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(1.6 * len(a), 3.6), dpi=110)
    for ax, frames, name in zip(axes, (b, a), (str(theirs["versions"]), str(mine["versions"]))):
        ax.imshow(np.concatenate(list(frames), 1).astype(np.uint8), interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    out = os.path.splitext(path)[0] + ".png"
    fig.savefig(out)
    print(f"wrote {out}")


def main(args: Baselines) -> dict:
    if args.compare_frames and not args.frames:
        raise SystemExit("dmc_baselines.py: error: --compare-frames needs --frames OUT.npz, this install's frames")
    print(versions())
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
    if args.frames:
        np.savez(args.frames, frames=render_frames(args.env_id, args.action_repeat), versions=versions())
        print(f"wrote {args.frames}")
    if args.compare_frames:
        compare_frames(args.frames, args.compare_frames)
    return results


if __name__ == "__main__":
    main(tyro.cli(Baselines))
