"""benchmarks/dmc_baselines.py: the reference policies' episodes have the scripts' env settings."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
# dm_control picks its renderer when first imported, for the whole process: without this, the xdist worker that runs
# this file would have GLFW (no display) and the DMC unit tests that render after it in the same process would abort
os.environ.setdefault("MUJOCO_GL", "egl")
pytest.importorskip("dm_control")
import dmc_baselines  # noqa: E402


def test_action_repeat_sums_every_control_step_and_episodes_are_1000_frames():
    """The zero action does not depend on when it is chosen, so its return must be the same with every action repeat
    (the rewards of all 1000 control steps summed, none skipped), in 1000 / repeat policy steps; a seed gives the same
    episode twice, and another seed another one."""
    one, steps_one = dmc_baselines.episode_return("cartpole-balance", "zero", seed=3, action_repeat=1)
    two, steps_two = dmc_baselines.episode_return("cartpole-balance", "zero", seed=3, action_repeat=2)
    assert (steps_one, steps_two) == (1000, 500)
    assert two == pytest.approx(one, rel=1e-9)
    assert dmc_baselines.episode_return("cartpole-balance", "zero", seed=3, action_repeat=2)[0] == two
    assert dmc_baselines.episode_return("cartpole-balance", "zero", seed=4, action_repeat=2)[0] != two
    random, _ = dmc_baselines.episode_return("cartpole-balance", "random", seed=3, action_repeat=2)
    assert 0 < random < two  # uniform actions shake the pole more than no action at all


def test_unknown_policy():
    with pytest.raises(SystemExit, match="unknown policy 'greedy'"):
        dmc_baselines.main(dmc_baselines.Baselines(seeds=1, policies=("greedy",)))


def test_frames_are_what_the_agent_sees_and_compare_to_themselves(tmp_path, capsys):
    """--frames renders 64 x 64 RGB frames that change along the episode; the same install gives the same frames, so
    comparing a file with itself finds no difference; --compare-frames alone is refused with one line."""
    frames = dmc_baselines.render_frames("cartpole-balance", action_repeat=2)
    assert frames.shape == (5, 64, 64, 3) and frames.dtype == "uint8"
    assert (frames[0] != frames[-1]).any()  # the random actions moved the cart or the pole
    path = str(tmp_path / "a.npz")
    dmc_baselines.main(dmc_baselines.Baselines(seeds=1, policies=(), frames=path, compare_frames=path))
    out = capsys.readouterr().out
    assert "max difference 0 of 255" in out and os.path.isfile(tmp_path / "a.png")
    with pytest.raises(SystemExit, match="--compare-frames needs --frames"):
        dmc_baselines.main(dmc_baselines.Baselines(seeds=1, policies=(), compare_frames=path))
