"""Hafner's replay-ratio scheduler. `--replay-ratio` is global gradient steps per policy step (one action in one env). With
`num_envs` envs per process and `world_size` processes, every rank calls `ratio(policy_step / world_size)`, `policy_step`
counting all envs of all ranks, and does that many gradient steps, each on its own batch: replay_ratio per policy step in all.
Hafner's `train_ratio` (replayed steps per policy step) = replay_ratio * batch_size * batch_length (0.5 * 16 * 64 = 512),
whatever the world size. Training starts after `learning_starts` policy steps; the Ratio is then fed the steps since then.

Why one ratio replaces `train_every`/`gradient_steps` pairs: for a replay ratio of 0.5 a user had to work out, per world size,
  4 envs: each loop iteration adds 4 policy steps, 4 * 0.5 = 2 -> gradient_steps=2 every iteration;
  2 envs: each loop iteration adds 2 policy steps, 2 * 0.5 = 1 -> gradient_steps=1 every iteration;
  1 env:  each loop iteration adds 1 policy step,  1 * 0.5 = 0.5 -> gradient_steps=1 every 2 iterations (train_every=2).
`global_step % train_every == 0` also skips updates when num_envs does not divide train_every: with 3 envs and train_every=2
it fires at 6, 12, ... only (a ratio of 1/6, not 0.5). Ratio keeps the fractional remainder: the target holds for any num_envs.
"""

import math
from dataclasses import dataclass

import tyro


class Ratio:
    """Returns how many gradient steps to do at `step`; the first call returns 1, as in Hafner's DreamerV3."""

    def __init__(self, ratio: float):
        if not math.isfinite(ratio) or ratio < 0:
            raise ValueError(f"replay ratio must be a finite number >= 0 (gradient steps per policy step), got {ratio}")
        self.ratio, self.prev = float(ratio), None

    def __call__(self, step: float) -> int:
        if self.ratio == 0:
            return 0
        if self.prev is None:
            self.prev = step
            return 1
        repeats = int((step - self.prev) * self.ratio)
        self.prev += repeats / self.ratio  # the remainder (step - prev) carries over to the next call
        return repeats

    def state_dict(self) -> dict:
        return {"ratio": self.ratio, "prev": self.prev}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__init__(state_dict["ratio"])  # validates the ratio
        self.prev = state_dict["prev"]


@dataclass
class Args:
    replay_ratio: float = 0.5
    """gradient steps per policy step, all envs of all processes counted"""
    num_envs: int = 4
    """environments per process"""
    world_size: int = 1
    """number of processes"""
    batch_size: int = 16
    """sequences per batch on each process"""
    batch_length: int = 64
    """time steps per sequence"""
    total_policy_steps: int = 2**16
    """policy steps to simulate, all envs of all processes counted"""
    verbose: bool = False
    """print one line per training event"""


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        r = Ratio(args.replay_ratio)
    except ValueError as e:
        raise SystemExit(f"--replay-ratio: {e}")
    gradient_steps = 0
    for policy_step in range(0, args.total_policy_steps, args.num_envs * args.world_size):
        repeats = r(policy_step / args.world_size)
        gradient_steps += repeats * args.world_size
        if args.verbose and repeats > 0:
            print(f"global iteration {policy_step}: {repeats} repeats")
    print(f"Replay ratio {args.replay_ratio}")
    print(f"Hafner train ratio {args.replay_ratio * args.batch_size * args.batch_length}")
    print(f"Final ratio {gradient_steps / args.total_policy_steps}")
