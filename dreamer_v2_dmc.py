# docs and experiment results can be found at docs/dreamer-v2-dmc.md#dreamer_v2_dmcpy
import copy
import ctypes
import ctypes.util
import datetime
import difflib
import glob
import math
import multiprocessing
import os
import random
import re
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass, fields
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch

# before any process group starts: imported after one (as the first torch.optim optimizer does), torch._dynamo keeps
# gloo's threads alive past destroy_process_group, and a torchrun rank could then abort as it exits
import torch._dynamo  # noqa: F401
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

from ratio import Ratio


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """sets `torch.backends.cudnn.deterministic=True` (turn off with --no-torch-deterministic)"""
    cuda: bool = True
    """use CUDA when it is available (falls back to the CPU, with a warning when --cuda is typed)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """whether to save the trained agent into `runs/{run_name}/{exp_name}.cleanrl_model`"""

    # Algorithm specific arguments
    env_id: str = "walker-walk"
    """the id of the environment (<domain>-<task>, dm_control/<domain>-<task>-v0, or any env with image observations)"""
    total_timesteps: int = 500_000
    """total policy steps (agent decisions, summed over all envs and processes); 500k = 1M frames at action repeat 2"""
    num_envs: int = 1
    """the number of parallel environments per process (more than 1: each in a subprocess of its own)"""
    buffer_size: int = 2_000_000
    """the replay memory size in policy steps, per process (capped at --total-timesteps)"""
    learning_starts: int = 1_000
    """policy steps collected with random actions before training starts (the paper's `prefill: 1000`, 2,000 frames)"""
    pretrain: int = 100
    """gradient steps done at once by each process when training starts (the paper's code: `pretrain 100`), before the
    schedule runs"""
    replay_ratio: float = 0.2
    """gradient steps per policy step, globally (one every 5 policy steps; Hafner's train ratio 160 = 0.2 x 16 x 50)"""
    batch_size: int = 16
    """the number of sequences in a batch (per process)"""
    batch_length: int = 50
    """the length of each sequence in a batch"""
    tbptt: bool = True
    """carry the RSSM state from one batch to the next along each batch row (truncated BPTT)"""
    tbptt_jump_prob: float = 1 / 16
    """chance that a batch row jumps to a random replay position instead of continuing (mean run of 16 chunks)"""
    action_repeat: int = 2
    """DMC action repeat: each action is applied for this many control steps, and only the last one is rendered"""
    camera: int = -1
    """DMC camera id (-1: the paper's choice, camera 2 for quadruped and camera 0 for every other domain)"""
    precision: Literal["auto", "32", "bf16"] = "auto"
    """`auto`: bf16 autocast (our form of the paper's 16-bit mixed precision) where the hardware runs bf16 natively, else 32"""
    compile: bool = False
    """torch.compile the whole gradient step (forward and backward; on CUDA with CUDA graphs)"""
    eval_every: int = 10_000
    """evaluate every this many policy steps (and at the end); 0 evaluates only at the end"""
    eval_episodes: int = 1
    """episodes per evaluation (0: no evaluation)"""
    eval_greedy: bool = True
    """evaluate with the actor's mode, the mean tanh(mu), as the paper's code does (--no-eval-greedy samples)"""
    log_every: int = 1_000
    """write scalars and a progress line every this many policy steps"""
    video_every: int = 10_000
    """write an open-loop dream video to TensorBoard every this many updates (per process; 0: never)"""
    checkpoint_every: int = 10_000
    """write runs/{run_name}/checkpoint.pt every this many policy steps (and at the end); 0: only at the end"""
    checkpoint_buffer: bool = False
    """also store the replay buffer in checkpoints, so a resumed run loses no data"""
    resume: Optional[str] = None
    """path of a checkpoint.pt to continue from (same run directory, step count and replay schedule)"""
    eval_model: Optional[str] = None
    """path of a saved model (--save-model) or checkpoint.pt to watch: plays --eval-episodes episodes, trains nothing"""

    # World model
    deter_size: int = 200
    """size of the deterministic GRU state h_t"""
    hidden_size: int = 200
    """width of the RSSM's hidden layers"""
    cnn_depth: int = 48
    """channels of the first encoder layer, doubled at each stage"""
    mlp_units: int = 400
    """width of the MLP heads"""
    mlp_layers: int = 4
    """hidden layers of the MLP heads"""
    stoch_size: int = 32
    """number of categorical latent variables in z_t"""
    classes: int = 32
    """classes per categorical latent"""
    reward_transform: Literal["tanh", "sign", "identity"] = "identity"
    """squashing of the rewards that the reward head learns (the paper's DMC setting: identity, the rewards as they are)"""
    kl_balance: float = 0.8
    """KL balancing alpha: the prior gets this share of the KL gradient, the posterior the rest"""
    kl_scale: float = 1.0
    """scale of the KL loss (beta)"""
    kl_free: float = 1.0
    """free nats: the batch-averaged KL is not optimised below this (1.0 on DMC)"""
    model_lr: float = 3e-4
    """world model learning rate"""
    model_eps: float = 1e-5
    """world model Adam epsilon"""
    model_grad_clip: float = 100.0
    """world model gradient clipping (global norm)"""
    weight_decay: float = 1e-6
    """every parameter shrinks by this fraction at each update, decoupled from Adam (all three optimizers)"""

    # Actor-critic
    imagination_horizon: int = 15
    """imagined steps from every posterior state"""
    gamma: float = 0.99
    """discount"""
    lmbda: float = 0.95
    """lambda of the lambda-returns"""
    actor_lr: float = 8e-5
    """actor learning rate"""
    critic_lr: float = 8e-5
    """critic learning rate"""
    ac_eps: float = 1e-5
    """actor and critic Adam epsilon"""
    ac_grad_clip: float = 100.0
    """actor and critic gradient clipping (global norm)"""
    actor_entropy: float = 1e-4
    """entropy regulariser of the actor"""
    actor_min_std: float = 0.1
    """lower bound of the actor's standard deviation (before truncation)"""
    expl_noise: float = 0.0
    """std of Gaussian noise added to the actor's training actions, clipped to [-1, 1] (the paper's `expl_noise`, 0)"""
    target_update_every: int = 100
    """the target critic moves towards the critic every this many updates, the first update included"""
    target_update_fraction: float = 1.0
    """how far the target critic moves each time (1: a hard copy)"""

    # to be filled in runtime
    world_size: int = 1
    """the number of processes (filled in at runtime from torchrun's WORLD_SIZE; not a flag to set)"""
    rank: int = 0
    """this process's rank (filled in at runtime from torchrun's RANK; not a flag to set)"""


# flags that fix the networks' shapes or the replay schedule: a checkpoint resumes only with the same values
RESUME_FLAGS = ("env_id", "num_envs", "deter_size", "hidden_size", "cnn_depth", "mlp_units",
                "mlp_layers", "stoch_size", "classes", "batch_size", "batch_length", "buffer_size",
                "replay_ratio", "learning_starts")  # fmt: skip
# with --eval-model these flags come from the command line, every other one from the saved model (not its --resume: a
# resumed run's checkpoint names the checkpoint it resumed from, and the evaluation is a run of its own)
EVAL_FLAGS = ("exp_name", "seed", "torch_deterministic", "cuda", "track", "wandb_project_name", "wandb_entity",
              "capture_video", "precision", "compile", "eval_episodes", "eval_greedy", "eval_model", "resume")  # fmt: skip


def fail(message: str):
    """Stop with one clear line on stderr and exit status 1."""
    raise SystemExit(f"{os.path.basename(sys.argv[0])}: error: {message}")


def dmc_task(env_id: str) -> Optional[tuple]:
    """(domain, task) of a DeepMind Control id, `walker-walk` or `dm_control/walker-walk-v0`; None for a registered
    gymnasium id or one of another form. Any other `a-b` is read as domain a, task b (check_env then names a domain or
    task that dm_control lacks). `cup` stands for ball_in_cup, as the papers write it (cup-catch)."""
    match = re.fullmatch(r"dm_control/(\w+)-(\w+)-v0", env_id)
    if match is None and env_id not in gym.registry:
        match = re.fullmatch(r"(\w+)-(\w+)", env_id)
    return ({"cup": "ball_in_cup"}.get(match[1], match[1]), match[2]) if match else None


def default_renderer():
    """Headless MuJoCo rendering: MUJOCO_GL=egl unless the user set it (osmesa where libEGL is missing and libOSMesa is
    there). dm_control reads the variable when it is first imported, so this runs before that import."""
    if "MUJOCO_GL" not in os.environ:
        osmesa = not ctypes.util.find_library("EGL") and ctypes.util.find_library("OSMesa")
        os.environ["MUJOCO_GL"] = "osmesa" if osmesa else "egl"


class DMC(gym.Env):
    """A dm_control suite task as a gymnasium env that returns 64x64 RGB frames from the task's camera (quadruped:
    camera 2), in a few lines instead of shimmy's wrapper, so that the render call is ours. step() applies the action for
    `action_repeat` control steps, sums their rewards and renders only after the last one (a frame costs far more than a
    physics step). The action space is the task's own (normalised to [-1, 1] by NormalizeAction in make_env). An episode
    ends with a step whose discount is 0, a termination (only lqr-lqr_2_1 and lqr-lqr_6_2 have them: no time limit, the
    episode ends once the state converges), or else at the task's time limit (1000 control steps, 500 policy steps at
    action repeat 2, for the paper's tasks), a truncation."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}  # render_fps: the frame rate of the videos RecordVideo writes

    def __init__(self, domain: str, task: str, action_repeat: int = 2, size: int = 64, camera: int = -1, render_mode=None):
        default_renderer()
        from dm_control import suite

        self.env = suite.load(domain, task)
        self.action_repeat, self.size, self.render_mode = action_repeat, size, render_mode
        self.camera = (2 if domain == "quadruped" else 0) if camera < 0 else camera
        if self.camera >= self.env.physics.model.ncam:
            raise ValueError(f"--camera {camera}: {domain} has cameras 0 to {self.env.physics.model.ncam - 1}")
        spec = self.env.action_spec()
        self.observation_space = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.action_space = gym.spaces.Box(spec.minimum.astype(np.float32), spec.maximum.astype(np.float32))
        self.frame = np.zeros((size, size, 3), np.uint8)

    def _render(self) -> np.ndarray:
        self.frame = np.ascontiguousarray(self.env.physics.render(self.size, self.size, camera_id=self.camera))
        return self.frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:  # the task draws each episode's initial state from this generator
            self.env.task._random = np.random.RandomState(seed)
        self.env.reset()
        return self._render(), {}

    def step(self, action):
        reward = 0.0
        for _ in range(self.action_repeat):
            time_step = self.env.step(action)
            reward += time_step.reward or 0.0
            if time_step.last():
                break
        terminated = time_step.last() and time_step.discount == 0
        return self._render(), reward, terminated, time_step.last() and not terminated, {}

    def render(self) -> np.ndarray:
        return self.frame  # the agent's own 64x64 view: videos cost no extra rendering

    def close(self):
        self.env.close()


class NormalizeAction(gym.ActionWrapper):
    """The agent acts in [-1, 1] on every bounded action dimension; the env gets low + (a + 1) / 2 * (high - low).
    Unbounded dimensions pass through unchanged (the paper's NormalizeAction)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.action_space
        self.bounded = np.isfinite(space.low) & np.isfinite(space.high)
        self.low, self.high = np.where(self.bounded, space.low, -1.0), np.where(self.bounded, space.high, 1.0)
        low, high = np.where(self.bounded, -1.0, space.low), np.where(self.bounded, 1.0, space.high)
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32))

    def action(self, action: np.ndarray) -> np.ndarray:
        return np.where(self.bounded, self.low + (action + 1) / 2 * (self.high - self.low), action).astype(np.float32)


def make_env(env_id, seed, idx, capture_video, run_name, action_repeat=2, camera=-1):
    def thunk():
        if multiprocessing.parent_process() is not None:  # a subprocess env: Ctrl-C is for the training process alone
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        render = {"render_mode": "rgb_array"} if capture_video and idx == 0 else {}
        # a DMC episode ends after the task's 1000 control steps (500 policy steps at action repeat 2; lqr on convergence)
        if dmc_task(env_id):
            env = DMC(*dmc_task(env_id), action_repeat=action_repeat, camera=camera, **render)
        else:  # any env with image observations and Box actions, e.g. the small pixel task of the tests
            env = gym.make(env_id, **render)
            if len(env.observation_space.shape) in (2, 3) and env.observation_space.shape[:2] != (64, 64):  # images only
                env = gym.wrappers.ResizeObservation(env, (64, 64))
            if len(env.observation_space.shape) == 2:
                env = gym.wrappers.ReshapeObservation(env, (64, 64, 1))
        if isinstance(env.action_space, gym.spaces.Box):
            env = NormalizeAction(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        if capture_video and idx == 0:
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        env.action_space.seed(seed)
        return env

    return thunk


def fail_render(env_id: str, e: Exception):
    """Rendering failed: say how to fix it. A half-made GL context would print warnings as the process exits; mute them."""
    sys.unraisablehook, message = lambda unraisable: None, str(e).splitlines()[0] if str(e) else ""
    warnings.simplefilter("ignore")
    fail(
        f"cannot render --env-id {env_id} with MUJOCO_GL={os.environ.get('MUJOCO_GL')} ({type(e).__name__}: {message}); "
        "headless rendering needs MUJOCO_GL=egl with the apt packages libegl1 libgl1-mesa-dri, or MUJOCO_GL=osmesa with "
        "libosmesa6"
    )


def check_env(args: Args):
    """Refuse env ids this script cannot train on, with one line that says what to do instead."""
    env_id, dmc = args.env_id, dmc_task(args.env_id)
    if env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4"):
        fail(f"--env-id {env_id} is an Atari game with discrete actions: use dreamer_v2_atari.py")
    if dmc:
        default_renderer()
        try:
            with warnings.catch_warnings():  # GL back ends warn on import when they find no display
                warnings.simplefilter("ignore")
                from dm_control import suite
        except ModuleNotFoundError as e:
            fail(
                f"--env-id {env_id} needs dm_control, which is not installed ({e.name} is missing): "
                "run `pip install -e .[dmc]`"
            )
        except Exception as e:  # dm_control picks its OpenGL back end when it is imported
            fail_render(env_id, e)
        domains = sorted({d for d, _ in suite.ALL_TASKS})
        if dmc[0] not in domains:
            ids = [f"{d}-{t}" for d, t in suite.ALL_TASKS] + list(gym.registry)
            close = difflib.get_close_matches(env_id.removeprefix("dm_control/").removesuffix("-v0"), ids, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"the DMC domains are {', '.join(domains)}"
            fail(f"unknown --env-id {env_id!r}: no DMC domain {dmc[0]!r} and no gymnasium id; {hint}")
        tasks = [t for d, t in suite.ALL_TASKS if d == dmc[0]]
        if dmc[1] not in tasks:
            close = [f"{dmc[0]}-{t}" for t in difflib.get_close_matches(dmc[1], tasks, n=3, cutoff=0.6)]
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            known = f"({dmc[0]} has {', '.join(tasks)})"
            fail(f"unknown --env-id {env_id!r}: DMC domain {dmc[0]} has no task {dmc[1]!r}; {hint}{known}")
    elif ":" not in env_id and env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
        fail(f"unknown --env-id {env_id!r}" + (f"; did you mean {' or '.join(close)}?" if close else ""))
    try:
        env = make_env(env_id, 0, 1, False, "", args.action_repeat, args.camera)()
    except Exception as e:  # a missing package, a bad camera, a broken environment
        fail(f"could not create --env-id {env_id}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    obs_space, act_space = env.observation_space, env.action_space
    if dmc:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                env.reset(seed=0)  # the first frame is rendered here
        except Exception as e:
            fail_render(env_id, e)
    env.close()
    if not (isinstance(obs_space, gym.spaces.Box) and obs_space.dtype == np.uint8 and len(obs_space.shape) == 3):
        fail(f"--env-id {env_id} has observations {obs_space}; this script needs uint8 image observations")
    if not (isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1):
        fail(
            f"--env-id {env_id} has a {type(act_space).__name__} action space; this DMC script needs continuous (Box) "
            "actions (use dreamer_v2_atari.py for discrete actions)"
        )


def describe_model(args: Args) -> str:
    """The model's name in the start-up line: the sizes that define it."""
    return (
        "model ("
        + ", ".join(
            f"{k.replace('_size', '')} {getattr(args, k)}"
            for k in ("deter_size", "hidden_size", "cnn_depth", "mlp_units", "mlp_layers")
        )
        + ")"
    )


def in_paper_terms(args: Args) -> str:
    """The start-up line that restates the training schedule in the flags of the paper's code."""
    train_every = f"{1 / args.replay_ratio:g}" if args.replay_ratio else "never"
    return (
        f"in the paper's code's terms (policy steps of one env; frames = policy steps x action repeat "
        f"{args.action_repeat}): train_steps 1 every train_every {train_every} policy steps, prefill "
        f"{args.learning_starts} policy steps, pretrain {args.pretrain} gradient steps"
    )


def check_args(args: Args):
    """Bad flag values end here with one line, before anything is created on disk."""
    try:
        Ratio(args.replay_ratio)
    except ValueError as e:
        fail(f"--replay-ratio: {e}")
    if args.compile and args.world_size > 1:  # not tried under torchrun yet
        fail("--compile does not run under torchrun yet; drop --compile, or train in one process")
    if args.replay_ratio > 64:
        fail(
            f"--replay-ratio {args.replay_ratio} means {args.replay_ratio:g} gradient steps per policy step; values above "
            "64 are almost surely a mix-up with Hafner's train ratio (divide it by batch size x batch length)"
        )
    positive = (
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "batch_size",
        "batch_length",
        "imagination_horizon",
        "action_repeat",
        "deter_size",
        "hidden_size",
        "cnn_depth",
        "mlp_units",
        "stoch_size",
        "classes",
        "target_update_every",
        "log_every",
        "actor_min_std",
    )
    for key in positive:
        if getattr(args, key) <= 0:
            fail(f"--{key.replace('_', '-')} must be positive, got {getattr(args, key)}")
    nonnegative = ("mlp_layers", "learning_starts", "pretrain", "eval_every", "video_every", "checkpoint_every")
    for key in nonnegative + ("eval_episodes", "expl_noise"):
        if getattr(args, key) < 0:
            fail(f"--{key.replace('_', '-')} cannot be negative, got {getattr(args, key)}")
    for key in ("tbptt_jump_prob", "kl_balance", "target_update_fraction"):
        if not 0 <= getattr(args, key) <= 1:
            fail(f"--{key.replace('_', '-')} must lie in [0, 1], got {getattr(args, key)}")
    if args.imagination_horizon < 2:
        fail(f"--imagination-horizon must be at least 2 (the actor learns from steps 0..H-2), got {args.imagination_horizon}")
    capacity = min(args.buffer_size, args.total_timesteps) // args.num_envs
    if args.batch_length > capacity:
        fail(
            f"--batch-length {args.batch_length} is longer than the replay holds per env ({capacity} steps = "
            "min(--buffer-size, --total-timesteps) / --num-envs): lower --batch-length or --num-envs, or raise the smaller of "
            "--buffer-size and --total-timesteps"
        )
    if args.learning_starts < args.batch_length * args.num_envs * args.world_size:
        fail(
            f"--learning-starts {args.learning_starts} is shorter than one sequence per env (--batch-length "
            f"{args.batch_length} x {args.num_envs * args.world_size} envs = "
            f"{args.batch_length * args.num_envs * args.world_size} policy steps): raise it"
        )
    if args.learning_starts > capacity * args.num_envs * args.world_size:
        fail(
            f"--learning-starts {args.learning_starts} is more than the replay can hold "
            f"({capacity * args.num_envs * args.world_size} policy steps), so training would never start: lower it"
        )
    if args.classes < 2:
        fail(f"--classes must be at least 2, got {args.classes}")
    if args.camera < -1:
        fail(f"--camera must be -1 (the paper's choice) or a camera id, got {args.camera}")


# TRY NOT TO MODIFY: run plumbing. The same text in every script (tests/test_plumbing.py compares them): checks of
# flags and checkpoints, torchrun, run directory and loggers, checkpoints, the stop on a signal, the progress line,
# --eval-model and the end-of-run checks. A variant of the algorithm leaves it alone (docs: Forking a script).
def save_checkpoint(path: str, payload: dict):
    """Write atomically: a temp file, fsync, then rename over the old checkpoint, so a kill never leaves a broken one."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str, flag: str = "--resume") -> dict:
    """A checkpoint for --resume; a checkpoint or a saved model (--save-model) for --eval-model."""
    wanted = "runs/<run_name>/checkpoint.pt" if flag == "--resume" else "runs/<run_name>/<exp_name>.cleanrl_model"
    if not os.path.isfile(path):
        fail(f"{flag} {path}: no such file (pass the {wanted} of an earlier run)")
    try:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception:
        fail(f"{flag} {path}: the file is truncated or corrupt; pass an intact {wanted}")
    if not isinstance(checkpoint, dict) or checkpoint.get("script") != os.path.basename(__file__):
        owner = checkpoint.get("script", "something else") if isinstance(checkpoint, dict) else "something else"
        fail(f"{flag} {path}: this file belongs to {owner}, not {os.path.basename(__file__)}")
    if flag == "--resume" and "replay" not in checkpoint:
        fail(f"--resume {path}: this is a saved model (--save-model), not a checkpoint; pass runs/<run_name>/checkpoint.pt")
    return checkpoint


def move_to(value, device: torch.device):
    """A checkpoint's value with every tensor in it (nested in dicts, tuples and lists) moved to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: move_to(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(move_to(v, device) for v in value)
    return value


class NonFinite:
    """Remembers, without waiting for the device, the first gradient step whose losses or gradient norms were not finite:
    `note` runs inside the training loop on device tensors only; `check`, which the loop calls once after each round of
    gradient steps (and before a checkpoint), reads that memory and stops the run with one line naming the loss."""

    def __init__(self, gradient_steps: int, device: torch.device):
        self.count = torch.full((), gradient_steps, dtype=torch.long, device=device)  # this gradient step's number
        self.first = torch.full((3,), -1, dtype=torch.long, device=device)  # gradient step, policy step, check index
        self.names = []

    def note(self, checks: dict, policy_step: int, world_size: int):
        self.names = list(checks)
        finite = torch.isfinite(torch.stack([v.detach().float() for v in checks.values()]))
        new = torch.stack([self.count, torch.full_like(self.count, policy_step), (~finite).long().argmax()])
        self.first = torch.where((self.first[0] < 0) & ~finite.all(), new, self.first)
        self.count += world_size

    def check(self, last_checkpoint, checkpoint_path: str, precision: str):
        gradient_step, policy_step, index = self.first.tolist()
        if gradient_step >= 0:  # stop; the last checkpoint written is from before the blow-up
            last = f"the last checkpoint, from policy step {last_checkpoint}, is {checkpoint_path}"
            fail(
                f"the {self.names[index]} became non-finite at gradient step {gradient_step} (policy step {policy_step}); "
                + (last if last_checkpoint is not None else "no checkpoint was written before it")
                + "; lower the learning rates"
                + (" or use --precision 32" if precision == "bf16" else "")
            )


def set_malloc_for_speed():
    """Keep glibc from returning freed activation memory to the OS after every step (docs: Speed)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 2**30)  # M_TRIM_THRESHOLD: keep up to 1 GiB of freed memory instead of returning it
        libc.mallopt(-4, 0)  # M_MMAP_MAX
    except (OSError, AttributeError):
        pass


def native_bf16(device: torch.device) -> bool:
    """Whether `device` runs bf16 matrix products in hardware: a CUDA GPU of compute capability 8.0 or later (Ampere),
    a CPU with AVX512-BF16 or AMX, as torch detects them. Elsewhere bf16 is emulated: a DreamerV2 gradient step took
    99.7 s instead of 9.3 s in fp32 on an AVX2-only CPU (docs: Speed)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= (8, 0)
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def choose_precision(args: Args, device: torch.device) -> str:
    """Turn --precision auto into bf16 where `device` runs it natively and 32 elsewhere; warn when an explicit bf16 will
    be emulated. Returns the note that the start-up line prints after the precision."""
    native = native_bf16(device)
    where = f"this GPU ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "this CPU"
    if args.precision == "auto":
        args.precision = "bf16" if native else "32"
        return f" (auto: {where} {'runs bf16 natively' if native else 'has no native bf16'})"
    if args.precision == "bf16" and not native:
        if args.rank == 0:
            isa = "" if device.type == "cuda" else f" (torch reports {torch.backends.cpu.get_cpu_capability()})"
            print(
                f"warning: --precision bf16 on {where}{isa}, which has no native bf16: it is emulated, and a gradient step is"
                " likely 10-30x slower than in fp32; use --precision auto or 32",
                file=sys.stderr,
            )
        return f" (emulated: {where} has no native bf16)"
    return f" (native on {where})" if args.precision == "bf16" else ""


class Run:
    """One training run around the algorithm. `Run(args)` checks the flags and a checkpoint to resume, starts torchrun's
    process group, creates the run directory, TensorBoard writer and wandb run: all that can fail before the first env
    step. The main block then registers the modules, optimizers and replay-ratio schedule once (`register`) and gets the
    loop's state (the script's `Loop`) from `start`; checkpoints, the parameter count, the rank-0 weight broadcast and
    the end-of-run checksums all read that one registry. The main block calls its methods and reads `device`, `writer`,
    `saved`, `checkpoint` and `run_name`; everything else in it is its own."""

    def __init__(self, args: Args):
        args.world_size, args.rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
        self.args, self.saved, self.checkpoint, self.rank_checkpoint = args, None, None, None
        if args.eval_model:  # watch a saved agent with the network and env flags it was trained with
            if args.resume or args.world_size > 1:
                fail("--eval-model watches a saved agent in one process: run it with python and without --resume")
            if not args.eval_episodes:
                fail("--eval-model plays --eval-episodes episodes: pass a positive number")
            self.saved = load_checkpoint(args.eval_model, "--eval-model")
            for key, value in self.saved["args"].items():
                if key not in EVAL_FLAGS:
                    setattr(args, key, value)
        check_args(args)
        if args.resume:
            self.checkpoint = checkpoint = load_checkpoint(args.resume)
            # a flag added after the checkpoint was written (a fork's new flag): that run had the flag's default
            predates, defaults = [k for k in RESUME_FLAGS if k not in checkpoint["args"]], vars(Args())
            trained = {k: checkpoint["args"][k] if k in checkpoint["args"] else defaults[k] for k in RESUME_FLAGS}
            mismatch = [k for k in RESUME_FLAGS if trained[k] != getattr(args, k)]
            if mismatch:
                fail(
                    f"--resume {args.resume}: the checkpoint was trained with "
                    + ", ".join(
                        f"--{k.replace('_', '-')} {trained[k]}"
                        + (" (its default: the checkpoint predates the flag)" if k in predates else "")
                        for k in mismatch
                    )
                    + f" (this run has {', '.join(str(getattr(args, k)) for k in mismatch)}); pass the same values"
                )
            if predates and args.rank == 0:
                print(f"--resume: the checkpoint predates {', '.join('--' + k.replace('_', '-') for k in predates)}; it "
                      f"resumes with the default {', '.join(str(defaults[k]) for k in predates)}")  # fmt: skip
            if checkpoint["world_size"] != args.world_size:
                fail(f"--resume {args.resume}: the run used {checkpoint['world_size']} processes; resume with the same number")
            rank_path = os.path.join(os.path.dirname(args.resume), f"checkpoint.rank{args.rank}.pt")
            self.rank_checkpoint = checkpoint if args.rank == 0 else load_checkpoint(rank_path)
            if self.rank_checkpoint["global_step"] != checkpoint["global_step"]:
                fail(
                    f"--resume: {rank_path} is from policy step {self.rank_checkpoint['global_step']}, {args.resume} from "
                    f"{checkpoint['global_step']}; the checkpoints of all ranks must come from the same step"
                )
        check_env(args)
        if "--cuda" in sys.argv[1:] and not torch.cuda.is_available():  # the default --cuda falls back silently
            print("warning: --cuda is set but CUDA is not available; running on the CPU", file=sys.stderr)
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if torch.cuda.is_available() and args.cuda and local_rank >= torch.cuda.device_count():
            fail(f"torchrun started more processes on this machine than it has GPUs ({torch.cuda.device_count()}): pass "
                 f"--nproc_per_node {torch.cuda.device_count()} or fewer, or --no-cuda to train on the CPU")  # fmt: skip
        self.device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() and args.cuda else "cpu")
        self.precision_note = choose_precision(args, self.device)
        if args.world_size > 1:
            # a long timeout: the other ranks wait while rank 0 evaluates
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=3))
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
        # the stop on a signal compares the ranks' flags on the CPU: no wait for the device
        self.cpu_group = dist.new_group(backend="gloo") if args.world_size > 1 and self.device.type == "cuda" else None
        set_malloc_for_speed()
        run_name = f"{args.env_id}__{args.exp_name}{'-eval' if self.saved else ''}__{args.seed}__{int(time.time())}"
        run_name = run_name.replace("/", "_")
        if self.checkpoint is not None:
            run_name = self.checkpoint["run_name"]
        elif args.world_size > 1:  # every rank writes into rank 0's run directory
            names = [run_name]
            dist.broadcast_object_list(names, 0)
            run_name = names[0]
        self.run_name, self.run_dir, self.writer = run_name, f"runs/{run_name}", None
        if self.checkpoint is None and args.rank == 0 and os.path.exists(self.run_dir):
            fail(f"{self.run_dir} already exists; pick another --exp-name or --seed (or --resume its checkpoint)")
        if args.rank == 0:  # only rank 0 creates run_dir: other ranks write into it after the weight broadcast
            os.makedirs(self.run_dir, exist_ok=True)
            if args.track:
                import wandb

                wandb.init(
                    project=args.wandb_project_name,
                    entity=args.wandb_entity,
                    sync_tensorboard=True,
                    config=vars(args),
                    name=run_name,
                    monitor_gym=False,  # wandb's gym hook breaks gymnasium 1.x's RecordVideo: upload_videos() sends them
                    save_code=True,
                    id=self.checkpoint.get("wandb_id") if self.checkpoint else None,
                    resume="allow",
                )
            # a resumed run hides what the log holds after its checkpoint's step (a checkpoint is written after all that
            # is logged at its step): a killed run's steps after its last checkpoint are done again, not shown twice
            purge_step = self.checkpoint["global_step"] + 1 if self.checkpoint is not None else None
            self.writer = SummaryWriter(self.run_dir, purge_step=purge_step)
            self.writer.add_text(
                "hyperparameters",
                "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
            )
        rank_file = "checkpoint.pt" if args.rank == 0 else f"checkpoint.rank{args.rank}.pt"
        self.checkpoint_path, self.uploaded_videos, self.objects = f"{self.run_dir}/{rank_file}", set(), {}

    def upload_videos(self):
        """With --track --capture-video, send each finished episode video in videos/{run_name} to wandb once."""
        if self.args.track and self.args.capture_video:
            import wandb

            for path in sorted(set(glob.glob(f"videos/{self.run_name}/*.mp4")) - self.uploaded_videos):
                wandb.log({"videos": wandb.Video(path, format="mp4")})
                self.uploaded_videos.add(path)

    def finish_eval_model(self, eval_returns: list, envs):
        """--eval-model: log each episode's return, print their mean, close everything and exit."""
        for episode, episode_return in enumerate(eval_returns):
            self.writer.add_scalar("eval/episodic_return", episode_return, episode)
        print(
            f"eval of {self.args.eval_model} (policy step {self.saved['global_step']}) on {self.args.env_id}: mean return "
            f"{np.mean(eval_returns):.2f} +- {np.std(eval_returns):.2f} over {len(eval_returns)} episodes",
            flush=True,
        )
        envs.close()
        self.upload_videos()
        self.writer.close()
        sys.exit(0)

    def register(self, **objects):
        """The modules, optimizers and replay-ratio schedule that a checkpoint holds, under their checkpoint keys (the
        world model as `wm`). Every rank starts from rank 0's weights; rank 0 prints the sizes of the trained modules;
        --resume restores every object's state."""
        args, self.objects = self.args, objects
        modules = {key: obj for key, obj in objects.items() if isinstance(obj, nn.Module)}
        if args.world_size > 1:  # every rank starts from rank 0's weights
            for module in modules.values():
                for tensor in list(module.parameters()) + list(module.buffers()):
                    dist.broadcast(tensor.data, 0)
        n_params = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        parts = dict(modules["wm"].named_children())  # the world model's parts, then the other trained modules
        parts.update({k: m for k, m in modules.items() if k != "wm" and any(p.requires_grad for p in m.parameters())})
        if args.rank == 0:
            print(
                f"{describe_model(args)}: "
                + ", ".join(f"{k} {n_params(m) / 1e6:.2f}M" for k, m in parts.items())
                + f"; total {sum(n_params(m) for m in parts.values()) / 1e6:.2f}M parameters"
            )
            print(
                f"replay ratio {args.replay_ratio:g} (gradient steps per policy step, global) | world size {args.world_size}"
                f" | batch {args.batch_size} x {args.batch_length} per rank, {args.batch_size * args.world_size} x "
                f"{args.batch_length} global | Hafner train ratio {args.replay_ratio * args.batch_size * args.batch_length:g}"
                f" (replayed steps per policy step) | device {self.device}, precision {args.precision}{self.precision_note}"
            )
        if self.checkpoint is not None:
            for key, obj in objects.items():
                obj.load_state_dict(self.checkpoint[key])

    def start(self, rb, envs, loop: "Loop") -> "Loop":
        """The loop's state: --resume's, or `loop` as the main block made it for a fresh run. A field that the checkpoint
        lacks (a counter added after it was written) keeps that starting value. Also restores this rank's replay and
        random generators, installs the stop on SIGINT / SIGTERM, and starts the clocks of the progress line."""
        device, checkpoint, rank_checkpoint = self.device, self.checkpoint, self.rank_checkpoint
        self.rb, self.envs, self.loop, self.last_checkpoint = rb, envs, loop, None
        if checkpoint is not None:
            for field in fields(loop):  # this rank's file; the counters of rank 0's file where an older rank file lacks them
                saved = rank_checkpoint.get(field.name, checkpoint.get(field.name, getattr(loop, field.name)))
                setattr(loop, field.name, move_to(saved, device))
            self.last_checkpoint = checkpoint["global_step"]
            rb.load_state_dict(rank_checkpoint["replay"])
            random.setstate(rank_checkpoint["rng"]["python"])
            np.random.set_state(rank_checkpoint["rng"]["numpy"])
            torch.set_rng_state(rank_checkpoint["rng"]["torch"].cpu())
            if device.type == "cuda" and rank_checkpoint["rng"]["cuda"] is not None:
                torch.cuda.set_rng_state(rank_checkpoint["rng"]["cuda"].cpu())
            envs.action_space.np_random.bit_generator.state = rank_checkpoint["rng"]["action_space"]
            print(f"resumed {self.run_name} at policy step {checkpoint['global_step']}, {checkpoint['gradient_steps']} "
                  "gradient steps")  # fmt: skip
        self.nonfinite = NonFinite(loop.gradient_steps, device)
        self.stop_signal, self.stopped = [], False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: self.stop_signal.append(signum))
        self.start_time, self.train_seconds = time.time(), 0.0  # train_seconds: the time of the rounds of gradient steps
        self.start_step, self.start_gradient_steps, self.last_progress = loop.global_step, loop.gradient_steps, time.time()
        self.metric_sums, self.metric_count, self.action_sums = {}, 0, None  # what log_progress averages
        return loop

    def state(self) -> tuple:
        """(this rank's checkpoint, the shared state); rank 0's checkpoint holds both; the shared state alone is what
        --save-model writes."""
        args, device = self.args, self.device
        loop = {field.name: getattr(self.loop, field.name) for field in fields(self.loop)}
        rank_state = dict(
            **loop,
            replay=self.rb.state_dict(args.checkpoint_buffer),
            rng=dict(
                python=random.getstate(),
                numpy=np.random.get_state(),
                torch=torch.get_rng_state(),
                cuda=torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                action_space=self.envs.action_space.np_random.bit_generator.state,
            ),
        )
        shared = dict(
            script=os.path.basename(__file__),
            args=asdict(args),
            run_name=self.run_name,
            world_size=args.world_size,
            **{key: obj.state_dict() for key, obj in self.objects.items()},
            **{key: value for key, value in loop.items() if isinstance(value, (int, float))},  # the counters
            wandb_id=None,
        )
        if args.track and args.rank == 0:
            import wandb

            shared["wandb_id"] = wandb.run.id
        return (dict(shared, **rank_state) if args.rank == 0 else dict(script=shared["script"], **rank_state)), shared

    def check_finite(self):
        """Stop with one line if a gradient step since the last check had a non-finite loss or gradient norm."""
        self.nonfinite.check(self.last_checkpoint, self.checkpoint_path, self.args.precision)

    def save(self, loop: "Loop"):
        """Write this rank's checkpoint atomically; never one from after a non-finite loss."""
        self.loop = loop
        self.check_finite()
        save_checkpoint(self.checkpoint_path, self.state()[0])
        self.last_checkpoint = loop.global_step

    def save_before_first_update(self, loop: "Loop"):
        """A checkpoint from before the first gradient step, should training blow up early (the first round only)."""
        if self.last_checkpoint is None:
            self.save(loop)

    def note_train(self, metrics: dict, checks: dict, policy_step: int):
        """After each gradient step, on device tensors only (no wait): remember a non-finite loss or gradient norm, and
        add the step's metrics to the sums that log_progress averages over the logging interval."""
        self.nonfinite.note(checks, policy_step, self.args.world_size)
        if self.args.rank == 0:
            for key, value in metrics.items():
                value = value.detach().float()
                self.metric_sums[key] = self.metric_sums[key] + value if key in self.metric_sums else value
            self.metric_count += 1

    def note_actions(self, action: torch.Tensor):
        """Each policy step's actions as the envs get them ([N, A]: one-hot or continuous), summed on the device for the
        actions/ statistics of log_progress."""
        if self.args.rank == 0:
            action = action.detach().float()
            sums = torch.stack([action.sum(0), action.square().sum(0), action.abs().sum(0)])  # [3, A]
            count = torch.full_like(sums[:1], action.shape[0])
            self.action_sums = torch.cat([sums, count]) + (self.action_sums if self.action_sums is not None else 0)

    def add_training_time(self, seconds: float):
        """The time of a round of gradient steps: the ETA counts the gradient steps still to come at their own cost."""
        self.train_seconds += seconds

    def checkpoint_due(self, global_step: int) -> bool:
        """Every --checkpoint-every policy steps (0: only at the end and on a stop)."""
        args = self.args
        return bool(args.checkpoint_every) and global_step % args.checkpoint_every < args.num_envs * args.world_size

    def stop_requested(self, global_step: int) -> bool:
        """True on every rank if any rank got SIGINT / SIGTERM: a stop must happen on every rank at the same step. Under
        torchrun the ranks compare their flags every 16th iteration of the loop (the same iterations on every rank, as
        the policy step grows alike), on the CPU, so that the loop does not wait for the slowest rank's env every time."""
        stop, args = bool(self.stop_signal), self.args
        if args.world_size > 1:
            if (global_step // (args.num_envs * args.world_size)) % 16:
                return False
            flag = torch.tensor([float(stop)])
            dist.all_reduce(flag, group=self.cpu_group)
            stop = bool(flag.item() > 0)
        self.stopped = stop
        return stop

    def log_due(self, global_step: int) -> bool:
        """Rank 0 logs every --log-every policy steps and at the last one."""
        args = self.args
        every = global_step % args.log_every < args.num_envs * args.world_size or global_step >= args.total_timesteps
        return args.rank == 0 and every

    def log_progress(self, loop: "Loop", episode_returns: list):
        """Rank 0, when `log_due`: TensorBoard's charts/, the training metrics averaged over the gradient steps since the
        last log, and the actions' statistics since then (actions/); and the progress line with its ETA, which once
        training has started also comes every 30 s of wall-clock (hours can pass between two logs on a small CPU)."""
        args, writer, now = self.args, self.writer, time.time()
        due = self.log_due(loop.global_step)
        if args.rank != 0 or not (due or loop.gradient_steps > self.start_gradient_steps and now - self.last_progress >= 30):
            return
        sps = (loop.global_step - self.start_step) / (now - self.start_time)
        if due:
            writer.add_scalar("charts/SPS", sps, loop.global_step)
            if loop.train_policy_steps:
                writer.add_scalar("charts/replay_ratio", loop.gradient_steps / loop.train_policy_steps, loop.global_step)
                writer.add_scalar("charts/gradient_steps", loop.gradient_steps, loop.global_step)
            self.upload_videos()
            if self.metric_count:  # the one wait for the device per log
                values = (torch.stack(list(self.metric_sums.values())) / self.metric_count).cpu().tolist()
                for key, value in zip(self.metric_sums, values):
                    writer.add_scalar(key, value, loop.global_step)
            if self.action_sums is not None:  # [4, A]: sums of the actions, their squares, their absolute values; count
                total, square, absolute, count = self.action_sums.cpu().double()
                mean = total / count
                if isinstance(self.envs.single_action_space, gym.spaces.Discrete):  # one-hot: each action's share
                    # the clamp: an action never taken adds 0 log 0 = 0 to the entropy, not 0 x -inf = nan
                    stats = {"entropy": -(mean * mean.clamp(min=1e-12).log()).sum(), "top_share": mean.max()}
                else:  # continuous: each dimension's mean, standard deviation and mean absolute value, averaged
                    std = (square / count - mean.square()).clamp(min=0).sqrt()
                    stats = {"mean": mean.mean(), "std": std.mean(), "abs_mean": (absolute / count).mean()}
                for key, value in stats.items():
                    writer.add_scalar(f"actions/{key}", float(value), loop.global_step)
            self.metric_sums, self.metric_count, self.action_sums = {}, 0, None
        self.last_progress = now
        # ETA: the policy steps left at their measured cost, plus the gradient steps left at theirs
        done_gradient_steps = loop.gradient_steps - self.start_gradient_steps
        if args.replay_ratio and not done_gradient_steps:
            eta = "starts with training"
        else:
            seconds_per_step = (now - self.start_time - self.train_seconds) / (loop.global_step - self.start_step)
            left = args.replay_ratio * (args.total_timesteps - max(loop.global_step, args.learning_starts))
            left_seconds = left * self.train_seconds / done_gradient_steps if done_gradient_steps else 0.0
            eta = datetime.timedelta(seconds=int((args.total_timesteps - loop.global_step) * seconds_per_step + left_seconds))
        recent = f" | return {np.mean(episode_returns[-10:]):.1f}" if episode_returns else ""
        print(
            f"step {loop.global_step}/{args.total_timesteps} ({100 * loop.global_step / args.total_timesteps:.0f}%) | SPS "
            f"{sps:.1f} | gradient steps {loop.gradient_steps} | replay ratio "
            f"{loop.gradient_steps / max(loop.train_policy_steps, 1):.3f} | ETA {eta}{recent}",
            flush=True,
        )

    def log_eval(self, global_step: int, eval_returns: list):
        self.writer.add_scalar("eval/episodic_return", np.mean(eval_returns), global_step)
        print(
            f"eval at step {global_step}: mean return {np.mean(eval_returns):.2f} over {len(eval_returns)} episodes",
            flush=True,
        )

    def finish(self):
        """After the loop: say how to resume a stopped run, --save-model, check that all ranks hold the same weights,
        close the envs and loggers, and leave torchrun's process group together."""
        args = self.args
        if self.stopped and args.rank == 0:
            launcher = f"torchrun --standalone --nproc_per_node {args.world_size}" if args.world_size > 1 else "python"
            print(
                f"stopped by signal at policy step {self.loop.global_step}; checkpoint written to "
                f"{self.checkpoint_path}\nresume with: {launcher} {os.path.basename(__file__)} --resume "
                f"{self.checkpoint_path} (plus the same flags)"
            )
        if args.save_model and args.rank == 0:
            model_path = f"{self.run_dir}/{args.exp_name}.cleanrl_model"
            torch.save(self.state()[1], model_path)
            print(f"model saved to {model_path}")
        if args.world_size > 1:  # data parallel must leave the same weights on every rank: compare float64 checksums
            params = [p for m in self.objects.values() if isinstance(m, nn.Module) for p in m.parameters()]
            checksum = torch.stack([torch.stack([p.double().sum(), p.double().square().sum()]) for p in params]).flatten()
            checksums = [torch.empty_like(checksum) for _ in range(args.world_size)]
            dist.all_gather(checksums, checksum)
            if args.rank == 0:
                if not all(torch.equal(c, checksums[0]) for c in checksums):
                    fail(f"the weights differ across the {args.world_size} ranks after training (a data-parallel bug)")
                print(f"weights identical on all {args.world_size} ranks")
        self.envs.close()  # finishes the last video
        if args.rank == 0:
            self.upload_videos()
            self.writer.close()
        if dist.is_initialized():
            dist.barrier()  # leave together: a rank that exits while another still tears down gloo can abort it
            dist.destroy_process_group()


# ALGO LOGIC: helpers
def transform_reward(reward: torch.Tensor, kind: str) -> torch.Tensor:
    """The reward head learns r itself on DMC (the paper's `clip_rewards: identity`); tanh and sign are for experiments."""
    return {"tanh": torch.tanh, "sign": torch.sign, "identity": lambda r: r}[kind](reward.float())


def gaussian_nll(mean: torch.Tensor, target: torch.Tensor, event_dims: int = 0) -> torch.Tensor:
    """-log N(target; mean, 1), summed over the last `event_dims` dimensions (the paper's unit-variance heads)."""
    nll = 0.5 * (mean.float() - target.float()).square() + 0.5 * math.log(2 * math.pi)
    return nll.sum(list(range(-event_dims, 0))) if event_dims else nll


def sample_onehot(logits: torch.Tensor) -> torch.Tensor:
    """One-hot sample with straight-through gradients: forward is the sample, backward flows through the probs.
    Drawn by inverse CDF, the first class whose cumulative probability exceeds one uniform number per categorical (the
    same distribution as Gumbel-max, with one random number per categorical instead of one per class)."""
    probs = F.softmax(logits, -1)
    uniform = torch.rand_like(probs[..., :1], dtype=torch.float32)
    index = (probs.float().cumsum(-1) < uniform).sum(-1, keepdim=True).clamp(max=probs.shape[-1] - 1)
    sample = torch.zeros_like(probs).scatter_(-1, index, 1.0)
    return sample + probs - probs.detach()


def scan_steps(step, carry: dict, xs: tuple, chunk: int = 8) -> tuple:
    """carry, y_t = step(carry, x_t) for t = 0..T-1 over the inputs xs [T, ...] -> (last carry, the y_t stacked [T, ...]).
    Carry and y_t are dicts of tensors. Eagerly a Python loop. Under torch.compile (--compile) a scan over chunks of
    `chunk` steps unrolled: the compiler optimises one chunk, whose steps fuse into few kernels, instead of every step
    (a fully unrolled loop took at least 2.7 times as long to compile and ran slower; docs/speed.md)."""

    def unroll(carry: dict, xs: tuple) -> tuple:
        ys = []
        for x in zip(*[v.unbind(0) for v in xs]):
            carry, y = step(carry, x)
            ys.append(y)
        return carry, {k: torch.stack([y[k] for y in ys]) for k in ys[0]}

    if not torch.compiler.is_compiling():
        return unroll(carry, xs)
    from torch._higher_order_ops.scan import scan  # private torch API, needed only under --compile: imported here

    def unroll_chunk(carry: dict, xs: tuple) -> tuple:
        carry, ys = unroll(carry, xs)
        return {k: v.clone() for k, v in carry.items()}, ys  # a scan's outputs must not alias each other

    steps = xs[0].shape[0]
    chunk = next(c for c in range(min(chunk, steps), 0, -1) if steps % c == 0)  # the largest divisor of T up to `chunk`
    carry, ys = scan(unroll_chunk, carry, tuple(v.unflatten(0, (steps // chunk, chunk)) for v in xs))
    return carry, {k: v.flatten(0, 1) for k, v in ys.items()}


class TruncNormal:
    """Normal(mean, std) truncated to [low, high] in each action dimension: the paper's `trunc_normal` actor (dists.py).

        alpha = (low - mean) / std,  beta = (high - mean) / std,  Z = Phi(beta) - Phi(alpha)
        sample:    x = mean + std Phi^-1(Phi(alpha) + u Z),  u ~ U(0, 1)      (inverse CDF: reparameterised, so the
                   gradient flows from x into mean and std), then clipped into [low + 1e-6, high - 1e-6] with a
                   straight-through gradient, as the paper's code does
        log_prob:  log phi((x - mean) / std) - log std - log Z
        entropy:   log(sqrt(2 pi e) std Z) + (alpha phi(alpha) - beta phi(beta)) / (2 Z)
        mode:      mean (clipped into [low, high])

    phi and Phi are the standard normal density and distribution function. log_prob and entropy are summed over the
    last (action) dimension."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, low: float = -1.0, high: float = 1.0, clip: float = 1e-6):
        self.mean, self.std, self.low, self.high, self.clip = mean.float(), std.float(), low, high, clip
        self.alpha, self.beta = (low - self.mean) / self.std, (high - self.mean) / self.std
        self.cdf_alpha = torch.special.ndtr(self.alpha)
        # Z > 0, so that log Z and 1 / Z stay finite where the mean lies so far outside [low, high] that Z rounds to 0
        self.Z = (torch.special.ndtr(self.beta) - self.cdf_alpha).clamp(min=1e-12)

    def sample(self) -> torch.Tensor:
        u = torch.rand_like(self.mean)
        p = (self.cdf_alpha + u * self.Z).clamp(1e-6, 1 - 1e-6)  # ndtri(0) = -inf; the tail beyond 4.75 std lands at 4.75
        x = self.mean + self.std * torch.special.ndtri(p)
        return x + (x.clamp(self.low + self.clip, self.high - self.clip) - x).detach()

    def mode(self) -> torch.Tensor:
        return self.mean.clamp(self.low, self.high)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        z = (x.float() - self.mean) / self.std
        return (-0.5 * z.square() - 0.5 * math.log(2 * math.pi) - self.std.log() - self.Z.log()).sum(-1)

    def entropy(self) -> torch.Tensor:
        pdf = lambda z: torch.exp(-0.5 * z.square()) / math.sqrt(2 * math.pi)  # noqa: E731
        tails = (self.alpha * pdf(self.alpha) - self.beta * pdf(self.beta)) / (2 * self.Z)
        return (0.5 * math.log(2 * math.pi * math.e) + self.std.log() + self.Z.log() + tails).sum(-1)


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) of [..., stoch, classes] categoricals, summed over the stoch latents -> [...]."""
    p_log, q_log = F.log_softmax(p_logits.float(), -1), F.log_softmax(q_logits.float(), -1)
    return (p_log.exp() * (p_log - q_log)).sum([-2, -1])


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = F.log_softmax(logits.float(), -1)
    return -(log_p.exp() * log_p).sum(-1)


def balanced_kl(post_logits: torch.Tensor, prior_logits: torch.Tensor, balance: float, free: float):
    """KL balancing (DreamerV2 Algorithm 2). Both terms have the value KL(post || prior), averaged over the batch and
    clipped below at `free` nats; they differ only in where the gradient goes. The prior, learning to predict the
    posterior, gets `balance` of the KL gradient; the posterior, regularised towards the prior, gets 1 - balance.
    Returns (loss, kl_prior, kl_post)."""
    kl_prior = categorical_kl(post_logits.detach(), prior_logits).mean().clamp(min=free)  # trains the prior
    kl_post = categorical_kl(post_logits, prior_logits.detach()).mean().clamp(min=free)  # trains the posterior
    return balance * kl_prior + (1 - balance) * kl_post, kl_prior.detach(), kl_post.detach()


def lambda_returns(reward, value, discount, lmbda: float) -> torch.Tensor:
    """TD(lambda) returns of an imagined trajectory (DreamerV2 eq. 4, indexed as in the paper's code), computed backwards:

        R_t = r_t + d_t ((1 - lambda) v_{t+1} + lambda R_{t+1}),   R_H = v_H

    reward r_t and discount d_t (gamma included) belong to state t: [H, N] for steps 0..H-1; value: [H+1, N] for steps
    0..H. Returns R_0..R_{H-1}: [H, N]."""
    interm = reward + discount * (1 - lmbda) * value[1:]
    returns = [value[-1]]
    for t in reversed(range(reward.shape[0])):
        returns.append(interm[t] + discount[t] * lmbda * returns[-1])
    return torch.stack(returns[1:][::-1])


@torch.no_grad()
def update_target_critic(critic: nn.Module, target_critic: nn.Module, updates: int, every: int, fraction: float):
    """Called after update number `updates` (from 0): every `every` updates the target critic moves `fraction` of the way
    to the critic; the first time it is a full copy. The paper: a hard copy after updates 0, 100, 200, ..."""
    if updates % every == 0:
        mix = 1.0 if updates == 0 else fraction
        for target, online in zip(target_critic.parameters(), critic.parameters()):
            target.lerp_(online, mix)


class SequenceReplay:
    """TBPTT sequence replay: per-env ring buffers, sampled as [T, B] chunks (time-major).

    Storage is [capacity // num_envs, num_envs, ...], one row per vector-env step; frames are uint8. Each of the B batch
    rows remembers where it stands (an env and a monotonic step index g). A row continues with the chunk right after its
    previous one, [g, g + T), so the world model starts it from the row's (detached) last posterior: truncated BPTT.
    A row restarts from a uniformly random valid position [oldest, newest - T + 1] with a fresh state (is_first forced on
    its first step) when its next chunk is not fully written yet, when its data was overwritten, with probability
    `jump_prob`, or always with tbptt=False. So every stored step is replayed: starts are uniform over the buffer,
    and rows then sweep forward through consecutive steps, across episode boundaries (is_first resets the state).
    """

    def __init__(self, capacity, num_envs, obs_shape, action_size, batch_size, batch_length, tbptt, jump_prob, seed):
        self.capacity, self.num_envs = capacity // num_envs, num_envs
        self.batch_size, self.batch_length, self.tbptt, self.jump_prob = batch_size, batch_length, tbptt, jump_prob
        self.obs = np.zeros((self.capacity, num_envs, *obs_shape), np.uint8)
        self.action = np.zeros((self.capacity, num_envs, action_size), np.float32)
        self.reward = np.zeros((self.capacity, num_envs), np.float32)
        self.is_first = np.zeros((self.capacity, num_envs), bool)
        self.is_terminal = np.zeros((self.capacity, num_envs), bool)
        self.added = 0  # steps added per env, never decreases; step g lives in slot g % capacity
        self.row_env = np.zeros(batch_size, np.int64)
        self.row_next = np.full(batch_size, -1, np.int64)  # step index of each row's next chunk; -1: start fresh
        self.rng = np.random.default_rng(seed)

    def add(self, obs, action, reward, is_first, is_terminal):
        slot = self.added % self.capacity
        self.obs[slot], self.action[slot], self.reward[slot] = obs, action, reward
        self.is_first[slot], self.is_terminal[slot] = is_first, is_terminal
        self.added += 1

    def __len__(self) -> int:
        return min(self.added, self.capacity) * self.num_envs

    def can_sample(self) -> bool:
        return min(self.added, self.capacity) >= self.batch_length

    def sample(self) -> dict:
        T, B = self.batch_length, self.batch_size
        oldest, last_start = max(0, self.added - self.capacity), self.added - T
        keep = (self.row_next >= oldest) & (self.row_next <= last_start) & (self.rng.random(B) >= self.jump_prob)
        fresh = ~keep if self.tbptt else np.ones(B, bool)
        self.row_env[fresh] = self.rng.integers(0, self.num_envs, fresh.sum())
        self.row_next[fresh] = self.rng.integers(oldest, last_start + 1, fresh.sum())
        slots = (self.row_next[None] + np.arange(T)[:, None]) % self.capacity  # [T, B]
        envs = self.row_env[None].repeat(T, 0)  # [T, B]
        batch = dict(
            obs=self.obs[slots, envs],
            action=self.action[slots, envs],
            reward=self.reward[slots, envs],
            is_first=self.is_first[slots, envs],
            is_terminal=self.is_terminal[slots, envs],
        )
        batch["is_first"][0, fresh] = True  # a fresh row starts from the initial state, whatever the carry holds
        self.row_next += T
        return batch

    def state_dict(self, with_data: bool) -> dict:
        state = dict(
            added=self.added, row_env=self.row_env.copy(), row_next=self.row_next.copy(), rng=self.rng.bit_generator.state
        )
        if with_data:
            n = min(self.added, self.capacity)
            for key in ("obs", "action", "reward", "is_first", "is_terminal"):
                state[key] = torch.from_numpy(getattr(self, key)[:n].copy())
        return state

    def load_state_dict(self, state: dict):
        self.rng.bit_generator.state = state["rng"]
        if "obs" not in state:  # the buffer was not saved: start empty, rows start fresh
            return
        self.added, self.row_env[:], self.row_next[:] = state["added"], state["row_env"], state["row_next"]
        for key in ("obs", "action", "reward", "is_first", "is_terminal"):
            data = state[key].numpy()
            getattr(self, key)[: len(data)] = data


# ALGO LOGIC: networks
def init_weights(module: nn.Module):
    """Glorot uniform weights and zero biases: the Keras defaults of the paper's code. Every other
    layer with parameters initialises them in its own `reset_parameters()` (LayerNorm: ones and zeros); one without that
    method stops the run with one line naming it: no parameter keeps the uninitialised memory of `torch.empty`."""
    for name, m in module.named_modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif next(m.parameters(recurse=False), None) is not None:  # any other layer: LayerNorm, or a fork's new one
            if not hasattr(m, "reset_parameters"):
                where = f"{type(module).__name__}.{name or 'self'} ({type(m).__name__})"
                shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in m.named_parameters(recurse=False))
                fail(f"init_weights: {where} has parameters with no initialisation rule ({shapes}); give it a "
                     "reset_parameters() method or a rule in init_weights")  # fmt: skip
            m.reset_parameters()


def dense(in_features: int, out_features: int) -> nn.Sequential:
    """Linear -> ELU, the building block of every DreamerV2 MLP (no normalisation)."""
    return nn.Sequential(nn.Linear(in_features, out_features), nn.ELU())


class MLP(nn.Module):
    def __init__(self, in_features: int, out_features: int, units: int, layers: int):
        super().__init__()
        sizes = [in_features] + [units] * layers
        self.hidden = nn.Sequential(*[dense(i, o) for i, o in zip(sizes[:-1], sizes[1:])])
        self.out = nn.Linear(sizes[-1], out_features)
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.hidden(x))


class Encoder(nn.Module):
    """64x64 image -> embed: four stride-2 4x4 'valid' convs (depth x 1, 2, 4, 8), 64 -> 31 -> 14 -> 6 -> 2, with ELU."""

    def __init__(self, channels: int, cnn_depth: int):
        super().__init__()
        layers, in_ch = [], channels
        for i in range(4):
            out_ch = cnn_depth * 2**i
            layers += [nn.Conv2d(in_ch, out_ch, 4, 2), nn.ELU()]
            in_ch = out_ch
        self.net = nn.Sequential(*layers)
        self.embed_size = in_ch * 2 * 2
        init_weights(self)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-3]  # [T, B] or [B]
        x = obs.reshape(-1, *obs.shape[-3:]).float() / 255.0 - 0.5  # pixels centred on 0, as in the paper's code
        x = self.net(x.contiguous(memory_format=torch.channels_last))
        return x.reshape(*lead, -1)  # [..., embed]


class Decoder(nn.Module):
    """feat -> 64x64 image mean: a linear layer to 1x1 x 32 depth, then four stride-2 transposed convs with kernels
    5, 5, 6, 6 (depth x 4, 2, 1, then the image channels), 1 -> 5 -> 13 -> 30 -> 64, with ELU in between."""

    def __init__(self, feat_size: int, channels: int, cnn_depth: int):
        super().__init__()
        self.depth = cnn_depth * 32
        self.linear = nn.Linear(feat_size, self.depth)
        layers, in_ch = [], self.depth
        for i, kernel in enumerate((5, 5, 6)):
            out_ch = cnn_depth * 2 ** (2 - i)
            layers += [nn.ConvTranspose2d(in_ch, out_ch, kernel, 2), nn.ELU()]
            in_ch = out_ch
        layers.append(nn.ConvTranspose2d(in_ch, channels, 6, 2))
        self.net = nn.Sequential(*layers)
        init_weights(self)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        lead = feat.shape[:-1]
        x = self.linear(feat.reshape(-1, feat.shape[-1]))  # [N, 32 depth]: a 1x1 image
        # the first transposed conv sees a 1x1 image, so it is one matrix product: computed as one (same maths, 3x faster)
        first = self.net[0]
        x = (x @ first.weight.flatten(1)).view(-1, *first.weight.shape[1:]) + first.bias[:, None, None]  # [N, 4 depth, 5, 5]
        x = self.net[1:](x.contiguous(memory_format=torch.channels_last))
        return (x + 0.5).reshape(*lead, *x.shape[1:])  # [..., C, 64, 64], pixels in [0, 1]: the encoder's centring undone


class RSSM(nn.Module):
    """Recurrent state-space model (DreamerV2 eq. 1), time-major: sequences are [T, B, ...], one step is [B, ...].

        recurrent model:       h_t = f(h_{t-1}, z_{t-1}, a_{t-1})      (GRU with LayerNorm, update bias -1)
        representation model:  z_t ~ q(z_t | h_t, x_t)                (post, sees the embedded image x_t)
        transition predictor:  z^_t ~ p(z^_t | h_t)                   (prior, used for imagination)

    A state is a dict: deter h_t [B, deter_size], stoch z_t [B, stoch, classes] (one-hot, straight-through), logits
    [B, stoch, classes]. The initial state is all zeros. feat = cat(h_t, flatten(z_t)) feeds every head.
    How one replayed chunk lines up (row b, t = 0..T-1):

        t          0      1      2      3   ...
        obs        o_0    o_1    o_2    o_3         o_t: the frame seen at step t
        reward     r_0    r_1    r_2    r_3         r_t: reward that came with o_t
        is_first   1      0      0      0           o_t began an episode: reset to the initial state
        is_term    0      0      0      0           o_t ended the episode by termination (only the lqr tasks do)
        action     a_0    a_1    a_2    a_3         a_t: chosen after seeing o_t
        obs_step   (h_{-1}, z_{-1}, a_{-1}) + o_0 -> post_0;  (post_0, a_0) + o_1 -> post_1;  ...

    so step t consumes the previous action a_{t-1}; for t = 0 it is the carried one (TBPTT) or zero.
    """

    def __init__(self, action_size, embed_size, deter_size, stoch_size, classes, hidden_size):
        super().__init__()
        self.deter_size, self.stoch_size, self.classes = deter_size, stoch_size, classes
        self.img_in = dense(stoch_size * classes + action_size, hidden_size)
        self.gru = nn.Linear(hidden_size + deter_size, 3 * deter_size)
        self.gru_norm = nn.LayerNorm(3 * deter_size, eps=1e-3)  # epsilon 1e-3: Keras's default, which the paper's code has
        self.img_out = dense(deter_size, hidden_size)
        self.img_logits = nn.Linear(hidden_size, stoch_size * classes)
        self.obs_out = dense(deter_size + embed_size, hidden_size)
        self.obs_logits = nn.Linear(hidden_size, stoch_size * classes)
        init_weights(self)

    def _logits(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return layer(x).reshape(*x.shape[:-1], self.stoch_size, self.classes).float()

    def initial(self, batch_size: int) -> dict:
        zeros = lambda *shape: self.img_logits.weight.new_zeros(batch_size, *shape)  # noqa: E731
        return dict(
            deter=zeros(self.deter_size),
            stoch=zeros(self.stoch_size, self.classes),
            logits=zeros(self.stoch_size, self.classes),
        )

    def get_feat(self, state: dict) -> torch.Tensor:
        return torch.cat([state["deter"], state["stoch"].flatten(-2)], -1)  # [..., deter + stoch * classes]

    def deter_step(self, prev_state: dict, prev_action: torch.Tensor) -> torch.Tensor:
        """Recurrent model: h_t = GRU(h_{t-1}, MLP(z_{t-1}, a_{t-1})) -> deter [B, deter]."""
        x = self.img_in(torch.cat([prev_state["stoch"].flatten(-2), prev_action], -1))
        deter = prev_state["deter"]
        reset, cand, update = self.gru_norm(self.gru(torch.cat([x, deter], -1)).float()).chunk(3, -1)
        cand = torch.tanh(torch.sigmoid(reset) * cand)
        update = torch.sigmoid(update - 1)  # biased towards keeping the old state
        return update * cand + (1 - update) * deter

    def prior_logits(self, deter: torch.Tensor) -> torch.Tensor:
        """Transition predictor: the prior's logits [..., stoch, classes] from h_t alone."""
        return self._logits(self.img_logits, self.img_out(deter))

    def img_step(self, prev_state: dict, prev_action: torch.Tensor) -> dict:
        """Prior step: h_t = GRU(h_{t-1}, MLP(z_{t-1}, a_{t-1})), z^_t ~ p(. | h_t)."""
        deter = self.deter_step(prev_state, prev_action)  # [B, deter]
        logits = self.prior_logits(deter)  # [B, stoch, classes]
        return dict(deter=deter, stoch=sample_onehot(logits), logits=logits)

    def obs_step(self, prev_state: dict, prev_action: torch.Tensor, embed: torch.Tensor, is_first: torch.Tensor):
        """Posterior step. Where is_first [B] is set, the previous state and action are replaced by zeros."""
        first = is_first.bool()[:, None]  # [B, 1]
        prev_state = {k: torch.where(first if v.dim() == 2 else first[..., None], 0.0, v) for k, v in prev_state.items()}
        prior = self.img_step(prev_state, torch.where(first, 0.0, prev_action))
        logits = self._logits(self.obs_logits, self.obs_out(torch.cat([prior["deter"], embed], -1)))
        post = dict(deter=prior["deter"], stoch=sample_onehot(logits), logits=logits)
        return post, prior

    def observe(self, embed, prev_actions, is_first, state: dict):
        """Filter a sequence: embed [T, B, E], prev_actions [T, B, A] (a_{t-1}), is_first [T, B] -> post, prior [T, B, ...].

        The same maths as calling obs_step at every t (a test checks it), arranged for speed: only what depends on the
        previous step stays in the loop. The embedding's share of the posterior's first layer, W [h; e] + b =
        W_h h + (W_e e + b), runs once on all T x B rows before the loop, and the prior's output layers, which read only
        h_t, once after it. The prior carries deter and logits: nothing samples from it here."""
        first = is_first.bool()[..., None]  # [T, B, 1]
        linear, activation = self.obs_out
        w_deter, w_embed = linear.weight.split([self.deter_size, embed.shape[-1]], 1)
        embed_in = F.linear(embed, w_embed, linear.bias)  # [T, B, hidden]: W_e e + b for every step at once
        w_deter = w_deter.to(embed_in.dtype)  # under autocast: cast the slice once, not at every step

        def step(state: dict, inputs: tuple) -> tuple:
            embed_t, action_t, first_t = inputs
            state = {k: torch.where(first_t if v.dim() == 2 else first_t[..., None], 0.0, v) for k, v in state.items()}
            deter = self.deter_step(state, torch.where(first_t, 0.0, action_t))
            logits = self._logits(self.obs_logits, activation(F.linear(deter, w_deter) + embed_t))
            state = dict(deter=deter, stoch=sample_onehot(logits), logits=logits)
            return state, state

        _, post = scan_steps(step, state, (embed_in, prev_actions, first))
        return post, dict(deter=post["deter"], logits=self.prior_logits(post["deter"]))

    def imagine(self, actions: torch.Tensor, state: dict) -> dict:
        """Open-loop prediction with given actions [T, B, A] from a state [B, ...] -> priors [T, B, ...]."""
        priors = []
        for t in range(actions.shape[0]):
            state = self.img_step(state, actions[t])
            priors.append(state)
        return {k: torch.stack([s[k] for s in priors]) for k in priors[0]}


class WorldModel(nn.Module):
    def __init__(self, obs_shape, action_size, args: Args):
        super().__init__()
        channels = obs_shape[0]
        self.encoder = Encoder(channels, args.cnn_depth)
        self.rssm = RSSM(
            action_size, self.encoder.embed_size, args.deter_size, args.stoch_size, args.classes, args.hidden_size
        )
        feat_size = args.deter_size + args.stoch_size * args.classes
        self.decoder = Decoder(feat_size, channels, args.cnn_depth)
        self.reward = MLP(feat_size, 1, args.mlp_units, args.mlp_layers)


class Actor(nn.Module):
    """pi(a_t | s_t): a truncated normal on [-1, 1] per action dimension with mean tanh(mu) and standard deviation
    2 sigmoid(sigma / 2) + min_std, where mu and sigma are two output layers on the same hidden layers."""

    def __init__(self, feat_size: int, action_size: int, units: int, layers: int, min_std: float = 0.1):
        super().__init__()
        self.net = MLP(feat_size, action_size, units, layers)
        self.std = nn.Linear(units if layers else feat_size, action_size)
        self.min_std = min_std
        init_weights(self)

    def forward(self, feat: torch.Tensor) -> tuple:
        hidden = self.net.hidden(feat)
        mean = torch.tanh(self.net.out(hidden).float())
        std = 2 * torch.sigmoid(self.std(hidden).float() / 2) + self.min_std
        return mean, std  # [..., A] each


class Critic(nn.Module):
    """v(s_t): the mean of a unit-variance Gaussian over the return."""

    def __init__(self, feat_size: int, units: int, layers: int):
        super().__init__()
        self.net = MLP(feat_size, 1, units, layers)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        return self.net(feat).squeeze(-1).float()  # [...]


# ALGO LOGIC: losses
def world_model_loss(wm: WorldModel, batch: dict, carry: tuple, scales: dict, args: Args):
    """Sum of the world model losses on a [T, B] batch (DreamerV2 eq. 2 with KL balancing, Algorithm 2; no discount head
    on DMC, the paper's `pred_discount: False`):

        L = image + reward + kl_scale * kl
        kl = alpha KL[sg(post) || prior] + (1 - alpha) KL[post || sg(prior)]

    image: -log N(o_t; decoder(feat_t), 1) summed over pixels; reward: -log N(r_t; reward(feat_t), 1); kl: balanced_kl with
    alpha = kl_balance, free nats kl_free. Returns (loss, losses, post, new carry, metrics); post is the filtered [T, B]
    states."""
    prev_state, prev_action = carry
    embed = wm.encoder(batch["obs"])  # [T, B, embed]
    prev_actions = torch.cat([prev_action[None], batch["action"][:-1]], 0)  # [T, B, A]: a_{t-1}
    post, prior = wm.rssm.observe(embed, prev_actions, batch["is_first"], prev_state)
    feat = wm.rssm.get_feat(post)  # [T, B, feat]
    recon = wm.decoder(feat)  # [T, B, C, 64, 64]
    kl, kl_prior, kl_post = balanced_kl(post["logits"], prior["logits"], args.kl_balance, args.kl_free)
    losses = {
        "image": gaussian_nll(recon, batch["obs"].float() / 255.0, event_dims=3),
        "reward": gaussian_nll(wm.reward(feat).squeeze(-1), transform_reward(batch["reward"], args.reward_transform)),
        "kl": kl,
    }
    assert losses.keys() == scales.keys(), (losses.keys(), scales.keys())
    loss = sum(scales[k] * v.mean() for k, v in losses.items())
    new_carry = ({k: v[-1].detach().clone() for k, v in post.items()}, batch["action"][-1].clone())  # copies, not views
    metrics = {
        "kl_prior": kl_prior,
        "kl_post": kl_post,
        "prior_entropy": categorical_entropy(prior["logits"].detach()).sum(-1).mean(),
        "post_entropy": categorical_entropy(post["logits"].detach()).sum(-1).mean(),
    }
    return loss, {k: v.mean() for k, v in losses.items()}, post, new_carry, metrics


def imagine_with_actor(wm: WorldModel, actor: Actor, start: dict, horizon: int):
    """Roll the prior forward `horizon` steps from every start state [N, ...], acting with the actor.

        s_0 --a_0--> s_1 --a_1--> ... --a_{H-1}--> s_H,   a_t ~ pi(. | sg(s_t)), a reparameterised truncated normal sample

    Returns feats [H+1, N, feat], actions [H, N, A] and the actor's outputs (mean, std) [H, N, A] at s_0..s_{H-1}. The
    graph is kept: the actor learns by backpropagating the imagined returns through these states (their latent samples
    are straight-through) into its own actions (the paper's `actor_grad: dynamics` for continuous actions). Its input is
    detached, so each action is credited only through the states it leads to. The actor loss takes its entropy bonus
    from the returned (mean, std) instead of running the actor on the same states again (the same numbers)."""
    state, feats, actions, means, stds = start, [wm.rssm.get_feat(start)], [], [], []
    for _ in range(horizon):
        mean, std = actor(feats[-1].detach())
        action = TruncNormal(mean, std).sample()
        state = wm.rssm.img_step(state, action)
        feats.append(wm.rssm.get_feat(state))
        actions.append(action)
        means.append(mean)
        stds.append(std)
    return torch.stack(feats), torch.stack(actions), (torch.stack(means), torch.stack(stds))


def actor_critic_loss(wm, critic, target_critic, feats, actions, policy, first_discount, args: Args):
    """Actor and critic losses on an imagined trajectory (DreamerV2 eqs. 4-6, indexed as in the paper's code):

        t          0      1      2           H-1      H
        state      s_0    s_1    s_2   ...   s_H-1    s_H     s_0: a posterior state of the replayed batch
        action     a_0    a_1    a_2         a_H-1            a_t ~ pi(. | s_t) leads to s_{t+1}
        reward     r_0    r_1    r_2         r_H-1            r_t = reward(s_t), the reward that came with s_t
        discount   d_0    d_1    d_2         d_H-1            d_t = gamma (no discount head); d_0 = gamma (1 - terminal)
        weight     1      d_0    d_0 d_1     ...              gamma^t: the weight of step t in the discounted sum
        return     R_0    R_1    R_2         R_H-1    v'_H    lambda-returns with the target critic v'

        critic: -log N(sg(R_t); v(sg(s_t)), 1) weight_t,  t = 0..H-1
        actor:  -(R_{t+1} + eta H[pi(. | sg(s_t))]) weight_t,  t = 0..H-2      (dynamics backpropagation)

    R_{t+1} depends on a_t through s_{t+1} onwards: the reward head, the target critic and the imagined states are all
    differentiable, and the actor's gradient flows through them into the actions. Only the actor's parameters are
    updated with it (`backward` computes the gradients of the given parameters alone)."""
    if torch.is_autocast_enabled(feats.device.type):  # each head would cast feats to bf16 on its own: cast them once
        feats = feats.to(torch.get_autocast_dtype(feats.device.type))
    reward = wm.reward(feats[:-1]).squeeze(-1).float()  # [H, N]
    discount = torch.cat([first_discount[None], torch.full_like(reward[1:], args.gamma)], 0)  # [H, N]
    weight = torch.cumprod(torch.cat([torch.ones_like(discount[:1]), discount[:-1]], 0), 0)  # [H, N]
    target_value = target_critic(feats)  # [H+1, N]
    returns = lambda_returns(reward, target_value, discount, args.lmbda)  # [H, N]
    policy = TruncNormal(policy[0][:-1], policy[1][:-1])  # [H-1, N, A]: the actor's, from imagine_with_actor
    entropy = policy.entropy()  # [H-1, N]
    actor_loss = (-(returns[1:] + args.actor_entropy * entropy) * weight[:-1]).mean()
    value = critic(feats[:-1].detach())  # [H, N]
    critic_loss = (gaussian_nll(value, returns.detach()) * weight).mean()
    metrics = dict(
        actor_entropy=entropy.detach().mean(),
        actor_std=policy.std.detach().mean(),
        imagined_return=returns.detach().mean(),
        imagined_reward=reward.detach().mean(),
        value=value.detach().mean(),
        target_value=target_value.detach().mean(),
    )
    return actor_loss, critic_loss, metrics


def behaviour_losses(wm, actor, critic, target_critic, post: dict, batch: dict, args: Args) -> tuple:
    """Imagine from every posterior state of the batch, then the actor and critic losses (one function: --compile
    compiles it whole)."""
    start = {k: v.detach().flatten(0, 1) for k, v in post.items()}  # [T * B, ...]
    feats, imagined_actions, policy = imagine_with_actor(wm, actor, start, args.imagination_horizon)
    first_discount = args.gamma * (1.0 - batch["is_terminal"].float().flatten(0, 1))
    return actor_critic_loss(wm, critic, target_critic, feats, imagined_actions, policy, first_discount, args)


def compile_loss_fns(device: torch.device) -> tuple:
    """--compile: torch.compile the gradient step's two halves whole, each with its backward pass: the world model loss
    (encoder, the observe loop as a chunked scan, decoder, heads) and the behaviour losses (imagination, actor, critic).
    No graph break is allowed (fullgraph). The optimizer steps stay eager, between them: the world model is updated
    before imagination, as in the paper's code. On CUDA also CUDA graphs ("reduce-overhead"): each half replays as one
    launch, so the step is not bound by thousands of kernel launches. Returns the compiled pair, which the main block
    passes to train_step as its `loss_fns`; the module's own two functions stay eager, so a second call wraps nothing
    twice."""
    mode = "reduce-overhead" if device.type == "cuda" else None
    loss_fns = tuple(torch.compile(fn, fullgraph=True, mode=mode) for fn in (world_model_loss, behaviour_losses))
    if device.type == "cuda":  # a replayed graph overwrites its outputs: copy out what outlives the step (carry, metrics)
        loss_fns = tuple(copy_outputs(fn) for fn in loss_fns)
    return loss_fns


def copy_outputs(function):
    """function, with every tensor it returns copied out of the CUDA graph's memory."""
    return lambda *args: torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, function(*args))


def backward_and_clip(loss: torch.Tensor, params: list, clip: float) -> torch.Tensor:
    """backward(loss, params), then (under torchrun) average the gradients over processes, then clip; returns the grad
    norm."""
    backward(loss, params)
    return average_and_clip(params, clip)


def backward(loss: torch.Tensor, params: list):
    """Sets the gradients of the loss for `params` only, with torch.autograd.grad: no other module's .grad is touched
    (the actor's loss backpropagates through the world model, whose .grad must keep the world model's own gradient)."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    for p, g in zip(params, grads):
        g = torch.zeros_like(p) if g is None else g.view_as(p)
        p.grad = g if g.stride() == p.stride() else torch.empty_like(p).copy_(g)  # fused Adam reads p's memory layout


def average_and_clip(params: list, clip: float) -> torch.Tensor:
    """Average the gradients over processes (under torchrun), then clip them; returns the grad norm."""
    if dist.is_initialized():
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        for p, g in zip(params, flat.split([g.numel() for g in grads])):
            p.grad = torch.empty_like(p).copy_(g.view_as(p))  # in p's memory layout, as fused Adam reads it
    return nn.utils.clip_grad_norm_(params, clip)


class DeviceBatch:
    """The replay's numpy batches as tensors on `device`. On the CPU: the arrays themselves (no copy). On CUDA: copied
    into device tensors that the first batch allocates and every later one reuses, through pinned memory, so that each
    copy is queued behind the previous gradient step (which still reads the tensors) without waiting for the device.
    With `static` (--compile), the tensors are marked as static addresses: the compiled step's CUDA graphs then read the
    batch where it lies instead of first copying it into their own memory."""

    def __init__(self, device: torch.device, static: bool = False):
        self.device, self.static, self.buffers = device, static, None

    def __call__(self, batch: dict) -> dict:
        if self.device.type != "cuda":
            return {k: torch.as_tensor(v) for k, v in batch.items()}
        if self.buffers is None:
            self.buffers = {k: torch.empty_like(torch.from_numpy(v), device=self.device) for k, v in batch.items()}
            if self.static:  # --compile: the CUDA graphs read the batch in place
                for buffer in self.buffers.values():
                    torch._dynamo.mark_static_address(buffer)
        for k, v in batch.items():
            self.buffers[k].copy_(torch.from_numpy(v).pin_memory(), non_blocking=True)
        return self.buffers


def train_step(wm, actor, critic, target_critic, model_opt, actor_opt, critic_opt, batch: dict, carry: tuple,
               loss_scales: dict, args: Args, autocast, updates: int,
               loss_fns: tuple = (world_model_loss, behaviour_losses)) -> tuple:  # fmt: skip
    """One gradient step: the world model on the batch, then the actor and critic on imagined trajectories that start
    from every posterior state of it, then the target critic (`updates`: the updates before this one). `loss_fns`: the
    functions that compute the losses (--compile passes compiled copies, compile_loss_fns). Returns the TBPTT carry for
    the next batch, the metrics to log and the values whose finiteness the loop checks (device tensors all: nothing here
    waits for the device)."""
    world_model_loss_fn, behaviour_losses_fn = loss_fns  # the eager world_model_loss and behaviour_losses, or compiled copies
    with autocast:
        wm_loss, losses, post, next_carry, wm_metrics = world_model_loss_fn(wm, batch, carry, loss_scales, args)
    model_grad_norm = backward_and_clip(wm_loss, list(wm.parameters()), args.model_grad_clip)
    model_opt.step()
    with autocast:
        actor_loss, critic_loss, ac_metrics = behaviour_losses_fn(wm, actor, critic, target_critic, post, batch, args)
    # one pass (compiled, both losses are one graph): their parameters are disjoint (the critic learns on detached
    # states, the actor's returns use the target critic), so each gets its own loss's gradient, and the world model,
    # which the actor's gradient passes through, gets none
    backward(actor_loss + critic_loss, list(actor.parameters()) + list(critic.parameters()))
    actor_grad_norm = average_and_clip(list(actor.parameters()), args.ac_grad_clip)
    critic_grad_norm = average_and_clip(list(critic.parameters()), args.ac_grad_clip)
    actor_opt.step()
    critic_opt.step()
    update_target_critic(critic, target_critic, updates, args.target_update_every, args.target_update_fraction)
    metrics = dict(
        **{f"losses/{k}": v for k, v in losses.items()},
        **{f"losses/{k}": v for k, v in wm_metrics.items()},
        **{
            "losses/model": wm_loss,
            "losses/actor": actor_loss,
            "losses/critic": critic_loss,
            "losses/model_grad_norm": model_grad_norm,
            "losses/actor_grad_norm": actor_grad_norm,
            "losses/critic_grad_norm": critic_grad_norm,
        },
        **{f"losses/{k}": v for k, v in ac_metrics.items()},
    )
    checks = {
        **{f"{k} loss": v for k, v in losses.items()},
        "world model gradient": model_grad_norm,
        "actor loss": actor_loss + actor_grad_norm,
        "critic loss": critic_loss + critic_grad_norm,
    }
    return next_carry, metrics, checks


@torch.no_grad()
def act(wm: WorldModel, actor: Actor, state: dict, prev_action, obs, is_first, greedy: bool):
    """One policy step: filter the new frame into the state, then pick an action in [-1, 1]^A."""
    embed = wm.encoder(obs)
    state, _ = wm.rssm.obs_step(state, prev_action, embed, is_first)
    policy = TruncNormal(*actor(wm.rssm.get_feat(state)))
    return state, policy.mode() if greedy else policy.sample()


@torch.no_grad()
def dream_video(wm: WorldModel, batch: dict, context: int = 5, rows: int = 6) -> torch.Tensor:
    """Open-loop video: observe `context` frames, then predict the rest from the actions alone.
    Returns [1, T, 3, 3 * 64, rows * 64] uint8 with real frames, predictions and error stacked vertically."""
    obs, action = batch["obs"][:, :rows], batch["action"][:, :rows]  # [T, b, C, H, W], [T, b, A]
    b = obs.shape[1]
    is_first = torch.zeros(obs.shape[:2], device=obs.device)
    is_first[0] = 1
    prev_actions = torch.cat([torch.zeros_like(action[:1]), action[:-1]], 0)
    post, _ = wm.rssm.observe(wm.encoder(obs[:context]), prev_actions[:context], is_first[:context], wm.rssm.initial(b))
    last = {k: v[-1] for k, v in post.items()}
    prior = wm.rssm.imagine(action[context - 1 : -1], last)  # predicts steps context..T-1
    feat = torch.cat([wm.rssm.get_feat(post), wm.rssm.get_feat(prior)], 0)
    model = wm.decoder(feat).float().clamp(0, 1)  # [T, b, C, H, W]
    truth = obs.float() / 255.0
    video = torch.cat([truth, model, (model - truth + 1) / 2], -2)  # [T, b, C, 3H, W]
    video = video.permute(0, 2, 3, 1, 4).reshape(video.shape[0], video.shape[2], video.shape[3], b * video.shape[4])
    video = video.expand(-1, 3, -1, -1) if video.shape[1] == 1 else video
    return (video[None] * 255).to(torch.uint8).cpu()


def evaluate(wm, actor, env_fn, episodes: int, greedy: bool, device, autocast, seed: int) -> list:
    """Play `episodes` full episodes in a fresh env and return their returns."""
    env, returns = env_fn(), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        state, action = wm.rssm.initial(1), torch.zeros(1, env.action_space.shape[0], device=device)
        is_first, done, total = torch.ones(1, device=device), False, 0.0
        while not done:
            obs_t = torch.as_tensor(obs, device=device).permute(2, 0, 1)[None]
            with autocast:
                state, action = act(wm, actor, state, action, obs_t, is_first, greedy)
            obs, reward, terminated, truncated, _ = env.step(action[0].float().cpu().numpy())
            total, done, is_first = total + float(reward), terminated or truncated, torch.zeros(1, device=device)
        returns.append(total)
    env.close()
    return returns


# ALGO LOGIC: the training loop's state
@dataclass
class Loop:
    """What the training loop counts and carries, saved in every checkpoint and restored by --resume (`Run.start`,
    `Run.save`): a new counter is one more field here. Numbers are the same on every rank; the rest (the TBPTT carry)
    is each rank's own. A checkpoint written before a field existed resumes with the field's starting value."""

    global_step: int = 0  # policy steps so far, all envs of all ranks
    train_policy_steps: int = 0  # policy steps since training started: what the replay-ratio schedule is fed
    gradient_steps: int = 0  # all ranks
    last_eval: int = 0  # the policy step of the last evaluation
    carry: tuple = ()  # (posterior state, action) where this rank's replay rows go on (TBPTT)


if __name__ == "__main__":
    args = tyro.cli(Args)
    run = Run(args)  # checks the flags (and the checkpoint of --resume), torchrun, run directory, TensorBoard, wandb
    device, writer = run.device, run.writer

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed + args.rank)
    np.random.seed(args.seed + args.rank)
    torch.manual_seed(args.seed + args.rank)  # the initial weights are broadcast from rank 0 by run.register
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup
    env_kwargs = dict(action_repeat=args.action_repeat, camera=args.camera)
    first_env = args.rank * args.num_envs
    train_video = args.capture_video and not run.saved  # --eval-model records its evaluation env instead
    env_fns = [
        make_env(args.env_id, args.seed + first_env + i, first_env + i, train_video, run.run_name, **env_kwargs)
        for i in range(args.num_envs)
    ]
    # several envs step in subprocesses, so their rendering runs in parallel; "spawn", since forked GL contexts hang
    envs = gym.vector.AsyncVectorEnv(env_fns, context="spawn") if args.num_envs > 1 else gym.vector.SyncVectorEnv(env_fns)
    assert isinstance(envs.single_action_space, gym.spaces.Box), "only continuous (Box) action spaces are supported"
    action_size = int(envs.single_action_space.shape[0])
    obs_shape = envs.single_observation_space.shape[-1:] + envs.single_observation_space.shape[:2]  # [C, H, W]

    # ALGO LOGIC: modules and optimizers
    wm = WorldModel(obs_shape, action_size, args).to(device)
    feat_size = args.deter_size + args.stoch_size * args.classes
    actor = Actor(feat_size, action_size, args.mlp_units, args.mlp_layers, args.actor_min_std).to(device)
    critic = Critic(feat_size, args.mlp_units, args.mlp_layers).to(device)
    target_critic = copy.deepcopy(critic).requires_grad_(False)
    wm.encoder.to(memory_format=torch.channels_last)
    wm.decoder.to(memory_format=torch.channels_last)
    # the paper's code shrinks every variable by (1 - weight_decay) before each Adam step: AdamW with decay weight_decay / lr
    model_opt = torch.optim.AdamW(
        wm.parameters(), lr=args.model_lr, eps=args.model_eps, weight_decay=args.weight_decay / args.model_lr, fused=True
    )
    actor_opt = torch.optim.AdamW(
        actor.parameters(), lr=args.actor_lr, eps=args.ac_eps, weight_decay=args.weight_decay / args.actor_lr, fused=True
    )
    critic_opt = torch.optim.AdamW(
        critic.parameters(), lr=args.critic_lr, eps=args.ac_eps, weight_decay=args.weight_decay / args.critic_lr, fused=True
    )
    loss_scales = {"image": 1.0, "reward": 1.0, "kl": args.kl_scale}
    # the loss functions that train_step calls: as defined above, or compiled whole (--compile)
    loss_fns = compile_loss_fns(device) if args.compile else (world_model_loss, behaviour_losses)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    if run.saved:  # --eval-model: play, log eval/ and the videos, train nothing
        wm.load_state_dict(run.saved["wm"])
        actor.load_state_dict(run.saved["actor"])
        eval_fn = make_env(args.env_id, args.seed, 0, args.capture_video, run.run_name, **env_kwargs)
        eval_returns = evaluate(wm, actor, eval_fn, args.eval_episodes, args.eval_greedy, device, autocast, args.seed)
        run.finish_eval_model(eval_returns, envs)  # logs, prints, closes and exits

    # replay and the replay-ratio schedule
    capacity = min(args.buffer_size, (run.checkpoint["args"] if run.checkpoint else asdict(args))["total_timesteps"])
    rb = SequenceReplay(capacity, args.num_envs, obs_shape, action_size, args.batch_size, args.batch_length, args.tbptt,
                        args.tbptt_jump_prob, args.seed + args.rank)  # fmt: skip
    device_batch = DeviceBatch(device, static=args.compile)  # on CUDA: the batch's fixed device memory
    ratio = Ratio(args.replay_ratio)
    carry = (wm.rssm.initial(args.batch_size), torch.zeros(args.batch_size, action_size, device=device))
    run.register(wm=wm, actor=actor, critic=critic, target_critic=target_critic, model_opt=model_opt, actor_opt=actor_opt,
                 critic_opt=critic_opt, ratio=ratio)  # fmt: skip
    if args.rank == 0:
        print(in_paper_terms(args))
    loop = run.start(rb, envs, Loop(carry=carry))  # a fresh run's state, or --resume's

    # ALGO LOGIC: start the game; each env's first frame starts an episode (is_first)
    obs, _ = envs.reset(seed=[args.seed + first_env + i + loop.global_step for i in range(args.num_envs)])
    is_first = np.ones(args.num_envs, bool)
    autoreset = np.zeros(args.num_envs, bool)  # NEXT_STEP autoreset: the next step() of these envs resets them
    reward, is_terminal = np.zeros(args.num_envs, np.float32), np.zeros(args.num_envs, bool)
    agent_state, prev_action = wm.rssm.initial(args.num_envs), torch.zeros(args.num_envs, action_size, device=device)
    episode_returns = []
    while loop.global_step < args.total_timesteps:
        # ALGO LOGIC: act
        obs_t = torch.as_tensor(obs, device=device).permute(0, 3, 1, 2)  # [N, C, H, W]
        if loop.global_step < args.learning_starts:  # prefill with random actions: no forward pass needed
            action = torch.rand(args.num_envs, action_size, device=device) * 2 - 1  # uniform in [-1, 1]
        else:
            with autocast:
                agent_state, action = act(
                    wm, actor, agent_state, prev_action, obs_t, torch.as_tensor(is_first, device=device), greedy=False
                )
            if args.expl_noise:
                action = (action + args.expl_noise * torch.randn_like(action)).clamp(-1, 1)
        prev_action = action.float()
        run.note_actions(prev_action)
        action_np = prev_action.cpu().numpy()
        rb.add(obs.transpose(0, 3, 1, 2), action_np, reward, is_first, is_terminal)

        # ALGO LOGIC: step the envs; after an episode's last step the next one returns the reset frame (is_first)
        obs, reward, terminated, truncated, infos = envs.step(action_np)
        is_first, autoreset = autoreset, terminated | truncated
        reward, is_terminal = np.where(is_first, 0.0, reward).astype(np.float32), terminated
        loop.global_step += args.num_envs * args.world_size

        # TRY NOT TO MODIFY: log the finished episodes
        if "episode" in infos:
            for i in np.nonzero(infos["_episode"])[0]:
                episode_returns.append(float(infos["episode"]["r"][i]))
                if args.rank == 0:
                    writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], loop.global_step)
                    writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], loop.global_step)

        # ALGO LOGIC: training, as many gradient steps as the replay ratio asks for
        train_start = time.time()
        if len(rb) * args.world_size >= args.learning_starts and rb.can_sample():
            run.save_before_first_update(loop)
            loop.train_policy_steps += args.num_envs * args.world_size
            repeats = ratio(loop.train_policy_steps / args.world_size)
            if loop.gradient_steps == 0 and repeats:  # the first training call pretrains (nothing with --replay-ratio 0)
                repeats = max(repeats, args.pretrain)
            for _ in range(repeats):
                batch = device_batch(rb.sample())
                updates = loop.gradient_steps // args.world_size  # this process's updates so far: the target critic's clock
                loop.carry, metrics, checks = train_step(wm, actor, critic, target_critic, model_opt, actor_opt,
                                                         critic_opt, batch, loop.carry, loss_scales, args, autocast,
                                                         updates, loss_fns=loss_fns)  # fmt: skip
                run.note_train(metrics, checks, loop.global_step)
                loop.gradient_steps += args.world_size
                if args.rank == 0 and args.video_every and (loop.gradient_steps // args.world_size) % args.video_every == 0:
                    with autocast:
                        writer.add_video("charts/dream", dream_video(wm, batch), loop.global_step, fps=15)
            if repeats:  # the one wait for the device per round of gradient steps
                run.check_finite()
        run.add_training_time(time.time() - train_start)

        # logging, evaluation, checkpoints
        run.log_progress(loop, episode_returns)
        done = loop.global_step >= args.total_timesteps
        if args.eval_episodes and (args.eval_every and loop.global_step - loop.last_eval >= args.eval_every or done):
            loop.last_eval = loop.global_step
            if args.rank == 0:
                # a fresh env, seeded apart from the training envs (seed + 0, 1, ...); episode seeds come from evaluate
                eval_fn = make_env(args.env_id, args.seed + 100_000, 1, False, run.run_name, **env_kwargs)
                eval_returns = evaluate(
                    wm, actor, eval_fn, args.eval_episodes, args.eval_greedy, device, autocast, args.seed + loop.global_step
                )
                run.log_eval(loop.global_step, eval_returns)
        stop = run.stop_requested(loop.global_step)  # SIGINT / SIGTERM on any rank
        if done or stop or run.checkpoint_due(loop.global_step):
            run.save(loop)
        if stop:
            break

    run.finish()  # --save-model, the ranks' weight checksums, closing
