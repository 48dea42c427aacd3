"""Tiny gymnasium environments for the bad-input tests, made with the `module:Env-v0` id syntax, e.g.
`--env-id tests.dummy_envs:ContinuousPixels-v0` (gymnasium imports this module, which registers the id)."""

import gymnasium as gym
import numpy as np


class ContinuousPixels(gym.Env):
    """64x64 RGB frames and a continuous (Box) action space: what an Atari script must refuse."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.frame = np.zeros((64, 64, 3), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.frame, {}

    def step(self, action):
        return self.frame, 0.0, False, False, {}

    def render(self):
        return self.frame


if "ContinuousPixels-v0" not in gym.registry:
    gym.register("ContinuousPixels-v0", entry_point=ContinuousPixels, max_episode_steps=50)
