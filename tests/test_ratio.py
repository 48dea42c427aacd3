"""Tests of ratio.py: the realised replay ratio, bad input, resuming from a state dict, and the documented demos."""

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ratio import Ratio

ROOT = Path(__file__).resolve().parent.parent
REPLAY_RATIOS = [1 / 16, 0.25, 0.5, 1, 2, 16]
NUM_ENVS = [1, 2, 4, 8]
WORLD_SIZES = [1, 2, 4]


def simulate(replay_ratio: float, num_envs: int, world_size: int, learning_starts: int, total_policy_steps: int):
    """Runs the training schedule of a script; yields (policy steps since training started, global gradient steps so far).

    Every loop iteration adds num_envs * world_size policy steps. Training starts at the first iteration with
    policy_step >= learning_starts; from then on each rank calls ratio((policy_step - start) / world_size) and does that
    many gradient steps. All ranks get the same argument, so one Ratio stands for each of them.
    """
    ratio = Ratio(replay_ratio)
    start, gradient_steps = None, 0
    for policy_step in range(0, total_policy_steps, num_envs * world_size):
        if policy_step < learning_starts:
            continue
        if start is None:
            start = policy_step
        gradient_steps += ratio((policy_step - start) / world_size) * world_size
        yield policy_step - start, gradient_steps


@pytest.mark.parametrize("replay_ratio,num_envs,world_size", list(itertools.product(REPLAY_RATIOS, NUM_ENVS, WORLD_SIZES)))
def test_realised_ratio_tracks_target(replay_ratio: float, num_envs: int, world_size: int):
    """After every call: 0 < gradient_steps - replay_ratio * policy_steps <= world_size.

    Why this bound (per rank, x = the step last passed to the Ratio, n = its gradient steps so far): the first call returns 1
    and sets prev = 0; each later call returns k and moves prev by k / ratio, so n = 1 + ratio * prev. The remainder left
    after a call is 0 <= x - prev < 1 / ratio, hence ratio * x < n <= ratio * x + 1: never a whole step behind, at most the
    first call's step ahead. With x = policy_steps / world_size and gradient_steps = world_size * n the bound follows. It
    cannot be narrowed: the upper end is reached at the first call and the lower one approached as the remainder nears
    1 / ratio. A scheduler that drops the remainder (prev = step) falls below it, e.g. ratio 0.25 with 2 envs never trains
    after its first call; one whose first call returns 0 or that rounds instead of truncating fails it too. The ratios are
    powers of two, so the float arithmetic here is exact and the comparison needs no tolerance.
    """
    steps = list(simulate(replay_ratio, num_envs, world_size, learning_starts=1000, total_policy_steps=8192))
    assert len(steps) > 100
    for policy_steps, gradient_steps in steps:
        excess = gradient_steps - replay_ratio * policy_steps
        assert 0 < excess <= world_size, (policy_steps, gradient_steps)
    assert steps[0] == (0, world_size)


@pytest.mark.parametrize("replay_ratio", [0.1, 1 / 3, 0.3, 2.7])
def test_realised_ratio_tracks_target_for_inexact_ratios(replay_ratio: float):
    """The same bound for ratios that binary floats cannot hold exactly, up to rounding."""
    for num_envs, world_size in itertools.product(NUM_ENVS, WORLD_SIZES):
        for policy_steps, gradient_steps in simulate(replay_ratio, num_envs, world_size, 1000, 8192):
            excess = gradient_steps - replay_ratio * policy_steps
            assert -1e-9 < excess <= world_size + 1e-9, (num_envs, world_size, policy_steps, gradient_steps)


def test_first_call_returns_one_then_remainder_is_kept():
    ratio = Ratio(0.5)
    assert [ratio(step) for step in range(10)] == [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    ratio = Ratio(0.25)
    assert [ratio(step) for step in range(0, 20, 2)] == [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    ratio = Ratio(2.5)
    assert [ratio(step) for step in range(5)] == [1, 2, 3, 2, 3]


@pytest.mark.parametrize("zero", [0, 0.0])
def test_zero_ratio_never_trains(zero: float):
    ratio = Ratio(zero)
    assert [ratio(step) for step in range(0, 10_000, 7)] == [0] * len(range(0, 10_000, 7))


@pytest.mark.parametrize("bad", [-1.0, -1e-9, -3, float("nan"), float("inf"), float("-inf")])
def test_bad_ratio_raises_with_the_value_and_what_is_allowed(bad: float):
    with pytest.raises(ValueError, match=re.escape(f"finite number >= 0 (gradient steps per policy step), got {bad}")):
        Ratio(bad)
    with pytest.raises(ValueError, match=re.escape(f"got {bad}")):
        Ratio(1.0).load_state_dict({"ratio": bad, "prev": None})


@pytest.mark.parametrize("replay_ratio", [0.3, 0.5, 2.7, 16])
@pytest.mark.parametrize("stop", [0, 1, 17, 123])
def test_state_dict_round_trip_continues_the_same_schedule(replay_ratio: float, stop: int):
    steps = [s * 3 + (s % 5) for s in range(400)]  # uneven increments leave varied remainders
    uninterrupted = Ratio(replay_ratio)
    expected = [uninterrupted(step) for step in steps]
    first = Ratio(replay_ratio)
    got = [first(step) for step in steps[:stop]]
    state = json.loads(json.dumps(first.state_dict()))  # a plain dict: survives any checkpoint format
    resumed = Ratio(1.0)
    resumed.load_state_dict(state)
    got += [resumed(step) for step in steps[stop:]]
    assert got == expected
    assert resumed.state_dict() == uninterrupted.state_dict()


def run_demo(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "ratio.py", *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_demo_with_defaults():
    result = run_demo()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Replay ratio 0.5", "Hafner train ratio 512.0", "Final ratio 0.4999847412109375"]


def test_demo_with_one_env_verbose():
    result = run_demo("--num-envs", "1", "--total-policy-steps", "32", "--verbose")
    assert result.returncode == 0, result.stderr
    events = [f"global iteration {step}: 1 repeats" for step in range(0, 32, 2)]
    assert result.stdout.splitlines() == events + ["Replay ratio 0.5", "Hafner train ratio 512.0", "Final ratio 0.5"]


def test_demo_rejects_negative_ratio_in_one_line():
    result = run_demo("--replay-ratio", "-1")
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "--replay-ratio: replay ratio must be a finite number >= 0 (gradient steps per policy step), got -1.0"
    ]


def test_import_has_no_side_effects():
    code = "import ratio; print(ratio.Ratio(0.5)(0))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1\n"
