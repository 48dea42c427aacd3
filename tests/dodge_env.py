"""Dodge: a second tiny pixel game for the learning tests, unlike Catch in what it asks of the agent.

A ROWS x LANES grid (5 x 3) holds a player (orange) in the bottom row and one rock (white) in each of the ROWS - 1 rows
above it, each rock in a random lane. Each step the player moves left (0), stays (1) or moves right (2) (a move into the
border leaves it where it is), and then every rock falls one row. A rock that lands in the player's cell ends the game
with reward -1; when the last rock has passed the player (after ROWS - 1 = 4 steps) the game ends with reward +1; every
other step gives 0.

Unlike Catch, the agent has to avoid rather than meet an object, and there is a new decision with its own failure at
every step: four rocks in a row, each of which ends the game if the player is in its lane when it lands, so the episode
lasts 1 to 4 steps and a win needs four right decisions in a row, each read from the rock about to land. A free lane is
always one move away, so every game can be won (+1). A random policy survives about one game in five and scores about
-0.6, as in Catch; so does staying put.

Frames are 64x64x3 uint8 drawn directly (each cell a block of about 13 x 21 pixels: black background, white rocks, an
orange player; a rock that hits the player is drawn on top of it). Importing this module registers `Dodge-v0`, so
`--env-id tests.dodge_env:Dodge-v0` works with the repository root as the working directory or on PYTHONPATH.
"""

import gymnasium as gym
import numpy as np

ROWS, LANES, SIZE = 5, 3, 64
ROCK_COLOR = np.array([255, 255, 255], np.uint8)
PLAYER_COLOR = np.array([255, 160, 0], np.uint8)


class Dodge(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, render_mode=None, rows: int = ROWS, lanes: int = LANES):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if not (2 <= rows <= SIZE and 2 <= lanes <= SIZE):
            raise ValueError(f"rows {rows} and lanes {lanes} must be between 2 and {SIZE}")
        self.render_mode, self.rows, self.lanes = render_mode, rows, lanes
        self.row_edges = np.linspace(0, SIZE, rows + 1).round().astype(int)  # cell r spans [edges[r], edges[r + 1])
        self.col_edges = np.linspace(0, SIZE, lanes + 1).round().astype(int)
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.rocks = np.zeros(rows - 1, int)  # rocks[i]: lane of the rock that starts in row i
        self.steps = self.player = 0

    def _draw_cell(self, frame: np.ndarray, row: int, col: int, color: np.ndarray, inset: int = 0):
        top, bottom = self.row_edges[row : row + 2]
        left, right = self.col_edges[col : col + 2]
        frame[top + inset : bottom - inset, left + inset : right - inset] = color

    def _frame(self) -> np.ndarray:
        frame = np.zeros((SIZE, SIZE, 3), np.uint8)
        self._draw_cell(frame, self.rows - 1, self.player, PLAYER_COLOR)
        for i, lane in enumerate(self.rocks):
            row = i + self.steps  # every rock has fallen `steps` rows
            if row < self.rows:
                self._draw_cell(frame, row, lane, ROCK_COLOR, inset=2)
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.rocks = self.np_random.integers(self.lanes, size=self.rows - 1)
        self.player = int(self.np_random.integers(self.lanes))
        self.steps = 0
        return self._frame(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r}; Dodge takes 0 (left), 1 (stay) or 2 (right)")
        if self.steps >= self.rows - 1 or self._hit():
            raise RuntimeError("step() called after the episode terminated; call reset()")
        self.player = int(np.clip(self.player + int(action) - 1, 0, self.lanes - 1))
        self.steps += 1
        if self._hit():
            return self._frame(), -1.0, True, False, {}
        terminated = self.steps == self.rows - 1
        return self._frame(), 1.0 if terminated else 0.0, terminated, False, {}

    def _hit(self) -> bool:
        """Whether the rock now in the bottom row (the one that started in row rows - 1 - steps) is in the player's lane."""
        i = self.rows - 1 - self.steps
        return 0 <= i < self.rows - 1 and self.rocks[i] == self.player

    def render(self):
        if self.render_mode == "rgb_array":
            return self._frame()
        return None


if "Dodge-v0" not in gym.registry:
    gym.register(id="Dodge-v0", entry_point=Dodge)
