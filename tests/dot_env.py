"""Dot: a tiny continuous-control pixel task for the learning test of dreamer_v2_dmc.py, cheap to draw with numpy.

An orange dot moves on a square arena [0, 1)^2 whose edges wrap around (a torus: leaving on the right re-enters on the
left); a white target sits at the centre. The action, in Box(-1, 1, (2,)), moves the dot by SPEED * action; the reward
after each move is minus the distance from the dot to the target (dense: every step says how far there is still to go;
from the centre, the distance on the torus is the plain one). An episode starts the dot at a random place and is
truncated after TIME_LIMIT steps (a time limit, never a termination, as in DeepMind Control). Uniformly random actions
score about -7.7 and so does any constant action; steering straight at the target scores about -0.2 (`oracle_action`).

Why a torus: with walls, an actor whose actions saturate early (dynamics backpropagation through a world model that
still knows little pushes tanh(mu) to +-1) parks the dot in a corner, where every action shows the world model nothing
new; on a torus a saturated action keeps the dot moving across the whole arena, so the data stays informative.

Frames are 64x64x3 uint8: the target is a SIZE x SIZE white square, the dot an orange one drawn on top, both placed at
position * (64 - SIZE), on black. Importing this module registers `Dot-v0`, so `--env-id tests.dot_env:Dot-v0` works
with the repository root as the working directory or on PYTHONPATH.
"""

import gymnasium as gym
import numpy as np

FRAME, SIZE, SPEED, TIME_LIMIT = 64, 12, 0.2, 20
TARGET = np.array([0.5, 0.5])
DOT_COLOR = np.array([255, 160, 0], np.uint8)
TARGET_COLOR = np.array([255, 255, 255], np.uint8)


class Dot(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode=None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (FRAME, FRAME, 3), np.uint8)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.dot = np.zeros(2)

    @staticmethod
    def _square(frame: np.ndarray, position: np.ndarray, color: np.ndarray):
        top, left = np.round(position * (FRAME - SIZE)).astype(int)  # the square lies inside the frame
        frame[top : top + SIZE, left : left + SIZE] = color

    def _frame(self) -> np.ndarray:
        frame = np.zeros((FRAME, FRAME, 3), np.uint8)
        self._square(frame, TARGET, TARGET_COLOR)
        self._square(frame, self.dot, DOT_COLOR)
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.dot = self.np_random.uniform(0, 1, 2)
        return self._frame(), {}

    def step(self, action):
        action = np.asarray(action, np.float64)
        if action.shape != (2,) or not np.isfinite(action).all():
            raise ValueError(f"invalid action {action!r}; Dot takes two finite numbers in [-1, 1]")
        self.dot = (self.dot + SPEED * np.clip(action, -1, 1)) % 1.0
        return self._frame(), -float(np.linalg.norm(self.dot - TARGET)), False, False, {}

    def oracle_action(self) -> np.ndarray:
        """What a policy that sees the positions would do: head straight at the target, at full speed until close."""
        return np.clip((TARGET - self.dot) / SPEED, -1, 1).astype(np.float32)

    def render(self):
        if self.render_mode == "rgb_array":
            return self._frame()
        return None


if "Dot-v0" not in gym.registry:
    gym.register(id="Dot-v0", entry_point=Dot, max_episode_steps=TIME_LIMIT)
