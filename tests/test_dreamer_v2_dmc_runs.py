"""dreamer_v2_dmc.py run as a subprocess with tiny networks on the real cartpole-balance of DeepMind Control, rendered with
MUJOCO_GL=egl (the script's default): the users' first command scaled down, with every TensorBoard tag and the realised
replay ratio; torchrun with 2 processes and identical weights at the end; SIGTERM then --resume with 2 envs in
subprocesses and no data lost; --eval-model with a video; a non-finite loss; and the bad input, each of which must end with
one clear line on stderr, a non-zero exit and no runs/ directory. Action repeat 8 makes an episode 125 policy steps (the
task's 1000 control steps), so that episodes end in these short runs. Every run happens in its own temporary directory
with the repo root on PYTHONPATH."""

import functools
import glob
import math
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests import helpers
from tests.helpers import assert_ok, assert_within_5_percent, error_lines, only_run_dir, progress_ratio, tensorboard

pytest.importorskip("tensorboard")

SCRIPT = helpers.script_path("v2-dmc")  # dreamer_v2_dmc.py, or the fork that DREAMER_V2_DMC names
NAME = SCRIPT.name  # what the script calls itself in its messages
command = functools.partial(helpers.command, SCRIPT)
run = functools.partial(helpers.run, SCRIPT)
assert_one_error_line = functools.partial(helpers.assert_one_error_line, SCRIPT)
run_until_training_then_sigterm = functools.partial(helpers.run_until_training_then_sigterm, SCRIPT)
TINY = (
    "--env-id cartpole-balance --action-repeat 8 --learning-starts 128 --pretrain 1 --batch-size 4 --batch-length 16 "
    "--deter-size 32 --hidden-size 32 --cnn-depth 4 --mlp-units 32 --mlp-layers 1 --stoch-size 4 --classes 4 "
    "--imagination-horizon 5 --log-every 100"
)
TAGS = (
    ["charts/SPS", "charts/replay_ratio", "charts/gradient_steps", "charts/episodic_return", "eval/episodic_return"]
    + ["actions/mean", "actions/std", "actions/abs_mean"]
    + [
        f"losses/{k}"
        for k in (
            "image reward kl kl_prior kl_post prior_entropy post_entropy model actor critic model_grad_norm actor_grad_norm "
            "critic_grad_norm actor_entropy actor_std imagined_return imagined_reward value target_value"
        ).split()
    ]
)


# ---------------------------------------------------------------- the users' first command, scaled down


@pytest.fixture(scope="module")
def user_run(tmp_path_factory) -> tuple:
    """`python dreamer_v2_dmc.py --env-id cartpole-balance --replay-ratio 0.5` scaled down: --precision auto, no
    --no-cuda (the default --cuda falls back to the CPU without a warning), a dream video every 40 gradient steps, and
    --save-model for the --eval-model test."""
    cwd = tmp_path_factory.mktemp("user")
    return cwd, run(f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --video-every 40 --save-model", cwd)


def test_user_command(user_run):
    cwd, result = user_run
    assert_ok(result)
    assert "replay ratio 0.5 (gradient steps per policy step, global) | world size 1 | batch 4 x 16 per rank" in result.stdout
    assert "Hafner train ratio 32 (replayed steps per policy step)" in result.stdout  # 0.5 x 4 x 16
    assert (
        "train_steps 1 every train_every 2 policy steps, prefill 128 policy steps, pretrain 1 gradient steps" in result.stdout
    )
    assert f"precision {helpers.AUTO_PRECISION}\n" in result.stdout  # the default follows the hardware
    assert re.search(r"^step 400/400 \(100%\) \| SPS [0-9.]+ \| gradient steps \d+ \| replay ratio ", result.stdout, re.M)
    assert_within_5_percent(progress_ratio(result.stdout), 0.5)
    assert helpers.CUDA_WARNING not in result.stderr
    assert re.search(r"^step 100/\d+ .* \| ETA starts with training", result.stdout, re.M)
    scalars, images = tensorboard(only_run_dir(cwd))
    assert not [tag for tag in TAGS if tag not in scalars], sorted(scalars)
    assert all(math.isfinite(v) for tag in TAGS for v in scalars[tag]), "a non-finite value was logged"
    assert "charts/dream" in images
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], 0.5)
    # three training episodes of 125 policy steps (1000 control steps at action repeat 8), each a return in [0, 1000]
    assert len(scalars["charts/episodic_return"]) == 3 and all(0 < r <= 1000 for r in scalars["charts/episodic_return"])
    assert 0 < scalars["eval/episodic_return"][-1] <= 1000
    assert 0.1 <= scalars["losses/actor_std"][-1] <= 2.1  # the truncated normal's std lies in (min_std, 2 + min_std)


# ---------------------------------------------------------------- torchrun


def test_torchrun_two_processes(tmp_path: Path):
    """torchrun --nproc_per_node 2 on the CPU (gloo): the global replay ratio is on target, and the script's end-of-run check
    finds the same weights (float64 sums and sums of squares of every tensor) on both ranks."""
    launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    result = run(
        f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --precision 32 --no-cuda --eval-episodes 0", tmp_path, launcher
    )
    assert_ok(result)
    assert "world size 2 | batch 4 x 16 per rank, 8 x 16 global | Hafner train ratio 32" in result.stdout
    assert "weights identical on all 2 ranks" in result.stdout
    assert result.stdout.count("step 400/400 (100%)") == 1  # only rank 0 logs
    assert_within_5_percent(progress_ratio(result.stdout), 0.5)
    run_dir = only_run_dir(tmp_path)
    assert_within_5_percent(tensorboard(run_dir)[0]["charts/replay_ratio"][-1], 0.5)
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert checkpoint["global_step"] == 400 and checkpoint["world_size"] == 2
    assert checkpoint["replay"]["added"] == 200  # each rank's env collected half of the policy steps


# ---------------------------------------------------------------- SIGTERM and --resume, 2 envs in subprocesses

RESUME_FLAGS = (
    f"--replay-ratio 0.25 --total-timesteps 640 {TINY} --num-envs 2 --precision 32 --checkpoint-buffer --no-cuda "
    "--eval-episodes 0"
)


def test_sigterm_then_resume_with_two_subprocess_envs(tmp_path: Path):
    """Kill a run of 2 envs (AsyncVectorEnv, spawn) with SIGTERM while it trains, then --resume it: it ends at the right
    step, the replay ratio on target, and with --checkpoint-buffer the resumed buffer holds every step collected before the
    kill."""
    killed = run_until_training_then_sigterm(RESUME_FLAGS, tmp_path)
    assert_ok(killed)
    stopped = re.search(r"^stopped by signal at policy step (\d+); checkpoint written to (\S+)$", killed.stdout, re.M)
    assert stopped, killed.stdout
    kill_step, path = int(stopped[1]), stopped[2]
    assert f"resume with: python {NAME} --resume {path} (plus the same flags)" in killed.stdout
    run_dir = only_run_dir(tmp_path)
    shutil.copy(tmp_path / path, tmp_path / "at_kill.pt")  # the resumed run overwrites checkpoint.pt
    at_kill = torch.load(tmp_path / "at_kill.pt", weights_only=False)
    assert 128 <= kill_step < 640 and at_kill["global_step"] == kill_step and at_kill["gradient_steps"] > 0
    assert at_kill["replay"]["added"] == kill_step // 2 and len(at_kill["replay"]["obs"]) == kill_step // 2  # per env

    resumed = run(f"{RESUME_FLAGS} --resume {path}", tmp_path)
    assert_ok(resumed)
    assert f"resumed {run_dir.name} at policy step {kill_step}, {at_kill['gradient_steps']} gradient steps" in resumed.stdout
    assert only_run_dir(tmp_path) == run_dir
    final = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert final["global_step"] == 640
    assert final["train_policy_steps"] == 640 - 126  # as uninterrupted: training starts at the 64th step of the 2 envs
    assert final["replay"]["added"] == 320  # nothing collected before the kill was lost
    assert torch.equal(final["replay"]["obs"][: kill_step // 2], at_kill["replay"]["obs"])
    assert_within_5_percent(final["gradient_steps"] / final["train_policy_steps"], 0.25)
    scalars, _ = tensorboard(run_dir)
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], 0.25)
    assert len(scalars["charts/replay_ratio"]) == 6  # logged at 200, 300, ..., 600 and 640 (the last step), none twice
    # each env ends an episode after 125 policy steps and spends one more on the autoreset; the resumed run starts new ones
    ended = lambda steps: len(range(125, steps + 1, 126))  # noqa: E731
    assert len(scalars["charts/episodic_return"]) == 2 * (ended(kill_step // 2) + ended(320 - kill_step // 2))


# ---------------------------------------------------------------- --eval-model


def test_eval_model_plays_and_records(user_run, tmp_path: Path):
    """--eval-model plays the saved agent with the flags it was trained with (action repeat 8: 125-step episodes), logs
    eval/episodic_return per episode and records a video of the agent's 64x64 view, in a run directory of its own, also
    for a resumed run's model (whose flags name the checkpoint it resumed from: the evaluation must not load it)."""
    saved = torch.load(next(only_run_dir(user_run[0]).glob("*.cleanrl_model")), weights_only=False)
    saved["args"]["resume"] = "runs/gone/checkpoint.pt"  # as a resumed run saves it
    model = tmp_path / "resumed.cleanrl_model"
    torch.save(saved, model)
    result = run(f"--eval-model {model} --eval-episodes 2 --capture-video --no-cuda", tmp_path)
    assert_ok(result)
    assert re.search(r"^eval of \S+ \(policy step 400\) on cartpole-balance: mean return [0-9.]+ \+- ", result.stdout, re.M)
    run_dir = only_run_dir(tmp_path)
    assert "-eval__" in run_dir.name
    scalars, _ = tensorboard(run_dir)
    assert len(scalars["eval/episodic_return"]) == 2 and "losses/model" not in scalars
    assert glob.glob(str(tmp_path / "videos" / run_dir.name / "*.mp4"))


# ---------------------------------------------------------------- non-finite losses


def test_non_finite_loss_stops_with_a_checkpoint_from_before(tmp_path: Path):
    result = run(f"--total-timesteps 400 {TINY} --precision 32 --model-lr 1e30 --no-cuda", tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, lines
    match = re.fullmatch(
        re.escape(NAME) + r": error: the (image loss|reward loss|kl loss|actor loss|critic loss|world model gradient) became "
        r"non-finite at gradient step \d+ \(policy step \d+\); the last checkpoint, from policy step \d+, is (\S+); lower the "
        r"learning rates",
        lines[0],
    )
    assert match, lines[0]
    checkpoint = torch.load(tmp_path / match[2], weights_only=False)
    assert max(v.abs().max().item() for v in checkpoint["wm"].values() if v.is_floating_point()) < 1e3


# ---------------------------------------------------------------- bad input: one clear line, non-zero exit, no runs/

BAD_INPUT = {
    "unknown_domain": ("--env-id walkr-walk", ["unknown --env-id 'walkr-walk'", "no DMC domain 'walkr'",
                                               "did you mean walker-walk"]),
    "unknown_task": ("--env-id dm_control/cheetah-runn-v0", ["DMC domain cheetah has no task 'runn'",
                                                             "did you mean cheetah-run?"]),
    "unknown_gym_id": ("--env-id Cartpole-v1", ["unknown --env-id 'Cartpole-v1'", "did you mean CartPole-v1"]),
    "discrete_actions": ("--env-id tests.catch_env:Catch-v0", ["Discrete action space", "needs continuous (Box) actions",
                                                               "use dreamer_v2_atari.py"]),
    "atari_id": ("--env-id ALE/Pong-v5", ["ALE/Pong-v5 is an Atari game with discrete actions: use dreamer_v2_atari.py"]),
    "no_image_observations": ("--env-id Pendulum-v1", ["--env-id Pendulum-v1", "needs uint8 image observations"]),
    "bad_camera": ("--env-id cartpole-balance --camera 9", ["could not create --env-id cartpole-balance", "--camera 9"]),
    "negative_ratio": ("--replay-ratio -1", ["--replay-ratio", "finite number >= 0", "got -1.0"]),
    "nan_ratio": ("--replay-ratio nan", ["--replay-ratio", "finite number >= 0", "got nan"]),
    "absurd_ratio": ("--replay-ratio 160", ["--replay-ratio 160", "Hafner's train ratio"]),
    "batch_longer_than_buffer": ("--total-timesteps 100 --batch-length 128 --learning-starts 128",
                                 ["--batch-length 128 is longer than the replay holds", "100 steps"]),
    "learning_starts_too_short": ("--learning-starts 10 --batch-length 16",
                                  ["--learning-starts 10 is shorter than one sequence", "raise it"]),
    "kl_balance_outside_0_1": ("--kl-balance 1.5", ["--kl-balance must lie in [0, 1]"]),
    "negative_pretrain": ("--pretrain -1", ["--pretrain cannot be negative"]),
    "resume_missing": ("--resume nowhere/checkpoint.pt", ["--resume nowhere/checkpoint.pt: no such file"]),
    "resume_other_script": ("--resume other.pt", ["--resume other.pt", "belongs to dreamer_v2_atari.py"]),
}  # fmt: skip
NO_RENDERER = ["cannot render --env-id cartpole-balance with MUJOCO_GL=disable", "No OpenGL rendering backend",
               "MUJOCO_GL=egl with the apt packages libegl1 libgl1-mesa-dri", "MUJOCO_GL=osmesa with libosmesa6"]  # fmt: skip


@pytest.fixture(scope="module")
def bad_input_results(request, tmp_path_factory) -> dict:
    """Each case in its own empty directory; they run concurrently since each spends its time importing torch. The last
    case has no renderer (MUJOCO_GL=disable: dm_control's own switch, the same failure on every machine). Only the cases
    this session runs (-k can choose a few)."""
    dirs = {name: tmp_path_factory.mktemp(name) for name in helpers.selected_cases(request, "test_bad_input")}
    if "resume_other_script" in dirs:
        torch.save({"script": "dreamer_v2_atari.py", "wm": {}}, dirs["resume_other_script"] / "other.pt")

    def no_renderer():
        return subprocess.run(command("--env-id cartpole-balance --no-cuda"), cwd=dirs["no_renderer"], capture_output=True,
                              text=True, timeout=120, env=helpers.env_vars(MUJOCO_GL="disable"))  # fmt: skip

    with ThreadPoolExecutor(max_workers=3) as pool:
        cases = [name for name in dirs if name != "no_renderer"]
        futures = {name: pool.submit(run, f"{BAD_INPUT[name][0]} --no-cuda", dirs[name], (), 120) for name in cases}
        if "no_renderer" in dirs:
            futures["no_renderer"] = pool.submit(no_renderer)
        return {name: (dirs[name], future.result()) for name, future in futures.items()}


@pytest.mark.parametrize("case", [*BAD_INPUT, "no_renderer"])
def test_bad_input(case: str, bad_input_results):
    cwd, result = bad_input_results[case]
    assert_one_error_line(result, cwd, *(NO_RENDERER if case == "no_renderer" else BAD_INPUT[case][1]))


def test_resume_with_another_model_size(user_run, tmp_path: Path):
    shutil.copy(only_run_dir(user_run[0]) / "checkpoint.pt", tmp_path / "checkpoint.pt")
    before = (tmp_path / "checkpoint.pt").read_bytes()
    flags = f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --no-cuda --resume checkpoint.pt"
    result = run(flags.replace("--deter-size 32", "--deter-size 64"), tmp_path)
    line = assert_one_error_line(result, tmp_path, "--resume checkpoint.pt", "--deter-size 32", "pass the same values")
    assert "64" in line and (tmp_path / "checkpoint.pt").read_bytes() == before
