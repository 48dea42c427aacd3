"""Catch: a tiny pixel game for the learning test of the Dreamer scripts.

A ball starts in the top row of a ROWS x COLS grid (5 x 5) at a random column and falls one row per step. A one-cell
paddle in the bottom row starts at a random column and moves left (0), stays (1) or moves right (2). When the ball
reaches the bottom row the episode terminates with reward +1 if the paddle is under it and -1 otherwise; every other step
gives 0. An episode therefore lasts ROWS - 1 = 4 steps. A random policy scores about -0.6 (it catches 1 ball in 5), and
so does any policy that ignores the ball; one that follows the ball catches every ball (+1), since the paddle can reach
any column in ROWS - 1 steps.

Observations are 64x64x3 uint8 frames drawn directly (each cell a block of about 13 x 13 pixels: black background, a
white ball, an orange paddle; a caught ball shows inside the paddle), so the training scripts need no resize. The grid is
small on purpose: with big blocks the world model finds the ball and the paddle within a few hundred gradient steps
(with 8 x 8 blocks it took twice as many). `rows` and `cols` are keyword arguments of gym.make for other sizes.
Importing this module registers `Catch-v0`, so `--env-id tests.catch_env:Catch-v0` works with the repository root as the
working directory or on PYTHONPATH.
"""

import gymnasium as gym
import numpy as np

ROWS, COLS, SIZE = 5, 5, 64
BALL_COLOR = np.array([255, 255, 255], np.uint8)
PADDLE_COLOR = np.array([255, 160, 0], np.uint8)


class Catch(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, render_mode=None, rows: int = ROWS, cols: int = COLS):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if not (2 <= rows <= SIZE and 2 <= cols <= SIZE):
            raise ValueError(f"rows {rows} and cols {cols} must be between 2 and {SIZE}")
        self.render_mode, self.rows, self.cols = render_mode, rows, cols
        self.row_edges = np.linspace(0, SIZE, rows + 1).round().astype(int)  # cell r spans [edges[r], edges[r + 1])
        self.col_edges = np.linspace(0, SIZE, cols + 1).round().astype(int)
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.ball_row = self.ball_col = self.paddle_col = 0

    def _draw_cell(self, frame: np.ndarray, row: int, col: int, color: np.ndarray, inset: int = 0):
        top, bottom = self.row_edges[row : row + 2]
        left, right = self.col_edges[col : col + 2]
        frame[top + inset : bottom - inset, left + inset : right - inset] = color

    def _frame(self) -> np.ndarray:
        frame = np.zeros((SIZE, SIZE, 3), np.uint8)
        self._draw_cell(frame, self.rows - 1, self.paddle_col, PADDLE_COLOR)
        self._draw_cell(frame, self.ball_row, self.ball_col, BALL_COLOR, inset=1)  # on top of the paddle when caught
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball_row = 0
        self.ball_col = int(self.np_random.integers(self.cols))
        self.paddle_col = int(self.np_random.integers(self.cols))
        return self._frame(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r}; Catch takes 0 (left), 1 (stay) or 2 (right)")
        if self.ball_row >= self.rows - 1:
            raise RuntimeError("step() called after the episode terminated; call reset()")
        self.paddle_col = int(np.clip(self.paddle_col + int(action) - 1, 0, self.cols - 1))
        self.ball_row += 1
        terminated = self.ball_row == self.rows - 1
        reward = (1.0 if self.paddle_col == self.ball_col else -1.0) if terminated else 0.0
        return self._frame(), reward, terminated, False, {}

    def render(self):
        if self.render_mode == "rgb_array":
            return self._frame()
        return None


if "Catch-v0" not in gym.registry:
    gym.register(id="Catch-v0", entry_point=Catch)
