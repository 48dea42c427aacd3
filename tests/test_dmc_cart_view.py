"""benchmarks/dmc_cart_view.py: what the camera of cartpole shows of the cart and the pole along the rail."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
os.environ.setdefault("MUJOCO_GL", "egl")  # before dm_control's first import in this process (see test_dmc_baselines.py)
pytest.importorskip("dm_control")
import dmc_cart_view  # noqa: E402


def test_the_camera_loses_the_pole_before_the_cart():
    """The docstring's geometry: the cart whole near the middle and cut off at the rail's end, never gone before the
    soft limit (about 1.87); the upright pole in view in the middle and out of the frame from about 1.7."""
    whole, pole = dmc_cart_view.pixels_at(0.0)
    assert whole > 20 and pole > 20
    assert dmc_cart_view.pixels_at(1.3)[0] >= 0.8 * whole and 0 < dmc_cart_view.pixels_at(1.85)[0] < 0.8 * whole
    assert dmc_cart_view.pixels_at(1.75)[1] == 0


def test_agent_policy_needs_a_checkpoint():
    with pytest.raises(SystemExit, match="--policy agent needs --checkpoint"):
        dmc_cart_view.play(dmc_cart_view.CartView(episodes=1))


def test_upright_and_action_size_of_the_zero_policy():
    """The zero action: every |action| is 0; the pole starts near upright and falls, so it is upright on average
    somewhere between hanging (0) and upright (1), and upright (above 0.95) in the first steps."""
    (total, positions, pixels, upright, size), = dmc_cart_view.play(dmc_cart_view.CartView(policy="zero", episodes=1))[0]
    assert len(upright) == len(size) == len(positions) == 500
    assert (size == 0).all() and upright[:5].min() > 0.95 and 0.05 < upright.mean() < 0.95
    assert 700 < total < 800  # 748.8 over 20 seeds (docs/results.md)
