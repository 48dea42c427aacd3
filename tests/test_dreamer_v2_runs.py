"""dreamer_v2_atari.py run as a subprocess with tiny networks on the real ALE/Pong-v5: the users' first command
(`--replay-ratio 0.5`, scaled down in steps and sizes) with its TensorBoard tags and realised replay ratio, torchrun with 2
processes, SIGTERM then --resume, a non-finite loss, and the catalogue of bad input, each of which must end
with one clear line on stderr, a non-zero exit and no runs/ directory. Every run happens in its own temporary directory
(runs/ lands there) with the repo root on PYTHONPATH for `from ratio import Ratio`."""

import functools
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests import helpers
from tests.helpers import (
    CUDA_WARNING,
    assert_ok,
    assert_within_5_percent,
    error_lines,
    only_run_dir,
    progress_ratio,
    tensorboard,
)

pytest.importorskip("ale_py")
pytest.importorskip("tensorboard")

SCRIPT = helpers.script_path("v2")  # dreamer_v2_atari.py, or the fork that DREAMER_V2 names
NAME = SCRIPT.name  # what the script calls itself in its messages
command = functools.partial(helpers.command, SCRIPT)
run = functools.partial(helpers.run, SCRIPT)
assert_one_error_line = functools.partial(helpers.assert_one_error_line, SCRIPT)
run_until_training_then_sigterm = functools.partial(helpers.run_until_training_then_sigterm, SCRIPT)
TINY = (
    "--learning-starts 128 --batch-size 4 --batch-length 16 --deter-size 32 --hidden-size 32 --cnn-depth 4 "
    "--mlp-units 32 --mlp-layers 1 --stoch-size 4 --classes 4 --imagination-horizon 5 --log-every 100"
)
TAGS = (
    ["charts/SPS", "charts/replay_ratio", "charts/gradient_steps", "eval/episodic_return"]
    + ["actions/entropy", "actions/top_share"]
    + [
        f"losses/{k}"
        for k in (
            "image reward discount kl kl_prior kl_post prior_entropy post_entropy model actor critic model_grad_norm "
            "actor_grad_norm critic_grad_norm actor_entropy imagined_return imagined_reward value target_value"
        ).split()
    ]
)


# ---------------------------------------------------------------- the users' first command, scaled down


@pytest.fixture(scope="module")
def user_run(tmp_path_factory) -> tuple:
    """`python dreamer_v2_atari.py --replay-ratio 0.5` with the defaults it does not scale down: --precision auto,
    ALE/Pong-v5, no --no-cuda (the default --cuda falls back to the CPU without a warning), plus a dream video
    every 40 gradient steps."""
    cwd = tmp_path_factory.mktemp("user")
    return cwd, run(f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --video-every 40", cwd)


def test_user_command_replay_ratio_half(user_run):
    cwd, result = user_run
    assert_ok(result)
    assert "replay ratio 0.5 (gradient steps per policy step, global) | world size 1 | batch 4 x 16 per rank" in result.stdout
    assert "Hafner train ratio 32 (replayed steps per policy step)" in result.stdout  # 0.5 x 4 x 16
    assert f"precision {helpers.AUTO_PRECISION}\n" in result.stdout  # the default follows the hardware
    assert re.search(r"^step 400/400 \(100%\) \| SPS [0-9.]+ \| gradient steps \d+ \| replay ratio ", result.stdout, re.M)
    assert_within_5_percent(progress_ratio(result.stdout), 0.5)
    assert CUDA_WARNING not in result.stderr  # the default --cuda falls back to the CPU without a warning
    assert re.search(r"^step 100/\d+ .* \| ETA starts with training", result.stdout, re.M)  # no training yet at step 100
    scalars, images = tensorboard(only_run_dir(cwd))
    assert not [tag for tag in TAGS if tag not in scalars], sorted(scalars)
    assert "charts/dream" in images
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], 0.5)
    assert scalars["charts/gradient_steps"][-1] >= 0.5 * (400 - 128)


def test_default_replay_ratio_is_one_update_every_16_steps():
    """The paper's schedule (train_every 16, one gradient step of 16 x 50): replay ratio 1/16, Hafner train ratio 50."""
    v2 = helpers.load_script("v2")

    args = v2.Args()
    assert args.replay_ratio == 1 / 16 and (args.batch_size, args.batch_length) == (16, 50)
    assert args.replay_ratio * args.batch_size * args.batch_length == 50


# ---------------------------------------------------------------- torchrun


def test_torchrun_two_processes(tmp_path: Path):
    """torchrun --nproc_per_node 2 on the CPU (gloo): it finishes, the global replay ratio is on target, and the script's
    end-of-run check finds the same weights (float64 sums and sums of squares of every tensor) on both ranks."""
    launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    result = run(f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --precision 32 --no-cuda", tmp_path, launcher)
    assert_ok(result)
    assert "world size 2 | batch 4 x 16 per rank, 8 x 16 global | Hafner train ratio 32" in result.stdout
    assert "weights identical on all 2 ranks" in result.stdout
    assert result.stdout.count("step 400/400 (100%)") == 1  # only rank 0 logs
    assert_within_5_percent(progress_ratio(result.stdout), 0.5)
    run_dir = only_run_dir(tmp_path)  # both ranks share rank 0's run directory
    assert_within_5_percent(tensorboard(run_dir)[0]["charts/replay_ratio"][-1], 0.5)
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert checkpoint["global_step"] == 400 and checkpoint["world_size"] == 2
    assert checkpoint["replay"]["added"] == 200  # each rank's env collected half of the policy steps


# ---------------------------------------------------------------- SIGTERM and --resume

RESUME_FLAGS = f"--replay-ratio 0.25 --total-timesteps 640 {TINY} --precision 32 --checkpoint-buffer --no-cuda"


def test_sigterm_then_resume(tmp_path: Path):
    """Kill a run with SIGTERM while it trains, then --resume it: it ends at the right step, the replay ratio still on
    target, and with --checkpoint-buffer the resumed buffer holds every step collected before the kill."""
    killed = run_until_training_then_sigterm(RESUME_FLAGS, tmp_path)
    assert_ok(killed)
    stopped = re.search(r"^stopped by signal at policy step (\d+); checkpoint written to (\S+)$", killed.stdout, re.M)
    assert stopped, killed.stdout
    kill_step, path = int(stopped[1]), stopped[2]
    assert f"resume with: python {NAME} --resume {path} (plus the same flags)" in killed.stdout
    run_dir = only_run_dir(tmp_path)
    shutil.copy(tmp_path / path, tmp_path / "at_kill.pt")  # the resumed run overwrites checkpoint.pt
    at_kill = torch.load(tmp_path / "at_kill.pt", weights_only=False)
    assert 128 < kill_step < 640 and at_kill["global_step"] == kill_step and at_kill["gradient_steps"] > 0
    assert at_kill["replay"]["added"] == kill_step and len(at_kill["replay"]["obs"]) == kill_step

    resumed = run(f"{RESUME_FLAGS} --resume {path}", tmp_path)
    assert_ok(resumed)
    assert f"resumed {run_dir.name} at policy step {kill_step}, {at_kill['gradient_steps']} gradient steps" in resumed.stdout
    assert only_run_dir(tmp_path) == run_dir  # the same run directory and TensorBoard log
    final = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert final["global_step"] == 640
    assert final["train_policy_steps"] == 640 - 127  # as in an uninterrupted run: training starts after the 128th step
    assert final["replay"]["added"] == 640  # nothing collected before the kill was lost
    assert torch.equal(final["replay"]["obs"][:kill_step], at_kill["replay"]["obs"])
    assert_within_5_percent(final["gradient_steps"] / final["train_policy_steps"], 0.25)
    assert_within_5_percent(progress_ratio(resumed.stdout), 0.25)
    scalars, _ = tensorboard(run_dir)
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], 0.25)
    assert len(scalars["charts/replay_ratio"]) == 6  # logged at 200, 300, ..., 600 and 640 (the last step), none twice


# ---------------------------------------------------------------- non-finite losses


def test_non_finite_loss_stops_with_a_checkpoint_from_before(tmp_path: Path):
    """--model-lr 1e30: the first world model update moves every weight by about 1e30 and the next loss is not finite.
    The run stops with one line naming the loss, and the checkpoint it points at is from before the first update."""
    result = run(f"--total-timesteps 400 {TINY} --precision 32 --model-lr 1e30 --no-cuda", tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, lines
    match = re.fullmatch(
        re.escape(NAME) + r": error: the (image loss|reward loss|discount loss|kl loss|actor loss|critic loss|"
        r"world model gradient) became non-finite at gradient step \d+ \(policy step \d+\); the last checkpoint, from "
        r"policy step \d+, is (\S+); lower the learning rates",
        lines[0],
    )
    assert match, lines[0]
    checkpoint = torch.load(tmp_path / match[2], weights_only=False)
    assert max(v.abs().max().item() for v in checkpoint["wm"].values() if v.is_floating_point()) < 1e3
    assert {int(s["step"]) for s in checkpoint["model_opt"]["state"].values()} <= {checkpoint["gradient_steps"]}


# ---------------------------------------------------------------- bad input: one clear line, non-zero exit, no runs/

BAD_INPUT = {
    "unknown_env_close_match": ("--env-id ALE/Pongg-v5", ["unknown --env-id 'ALE/Pongg-v5'", "did you mean ALE/Pong-v5"]),
    "no_image_observations": ("--env-id CartPole-v1", ["--env-id CartPole-v1", "needs uint8 image observations"]),
    "continuous_actions": ("--env-id tests.dummy_envs:ContinuousPixels-v0", ["Box action space", "needs discrete actions"]),
    "negative_ratio": ("--replay-ratio -1", ["--replay-ratio", "finite number >= 0", "got -1.0"]),
    "nan_ratio": ("--replay-ratio nan", ["--replay-ratio", "finite number >= 0", "got nan"]),
    "absurd_ratio": ("--replay-ratio 1024", ["--replay-ratio 1024", "Hafner's train ratio"]),
    "batch_longer_than_buffer": ("--total-timesteps 100 --batch-length 128 --learning-starts 128",
                                 ["--batch-length 128 is longer than the replay holds", "100 steps"]),
    "learning_starts_too_short": ("--learning-starts 10 --batch-length 16",
                                  ["--learning-starts 10 is shorter than one sequence", "raise it"]),
    "kl_balance_outside_0_1": ("--kl-balance 1.5", ["--kl-balance must lie in [0, 1]"]),
    "resume_missing": ("--resume nowhere/checkpoint.pt", ["--resume nowhere/checkpoint.pt: no such file"]),
    "resume_other_script": ("--resume other.pt", ["--resume other.pt", "belongs to dreamer_v3_atari.py"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def bad_input_results(request, tmp_path_factory) -> dict:
    """Each case in its own empty directory; they run concurrently since each spends its time importing torch. Only the
    cases this session runs (-k can choose a few)."""
    dirs = {name: tmp_path_factory.mktemp(name) for name in helpers.selected_cases(request, "test_bad_input")}
    if "resume_other_script" in dirs:
        torch.save({"script": "dreamer_v3_atari.py", "wm": {}}, dirs["resume_other_script"] / "other.pt")
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run, f"{BAD_INPUT[name][0]} --no-cuda", dirs[name], (), 120) for name in dirs}
        return {name: (dirs[name], future.result()) for name, future in futures.items()}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input(case: str, bad_input_results):
    cwd, result = bad_input_results[case]
    assert_one_error_line(result, cwd, *BAD_INPUT[case][1])


def test_resume_truncated_checkpoint(user_run, tmp_path: Path):
    data = (only_run_dir(user_run[0]) / "checkpoint.pt").read_bytes()
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    result = run(f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --no-cuda --resume truncated.pt", tmp_path)
    assert_one_error_line(result, tmp_path, "--resume truncated.pt", "truncated or corrupt")
    assert (tmp_path / "truncated.pt").read_bytes() == data[: len(data) // 2]  # left as it was


def test_resume_with_another_model_size(user_run, tmp_path: Path):
    shutil.copy(only_run_dir(user_run[0]) / "checkpoint.pt", tmp_path / "checkpoint.pt")
    before = (tmp_path / "checkpoint.pt").read_bytes()
    flags = f"--replay-ratio 0.5 --total-timesteps 400 {TINY} --no-cuda --resume checkpoint.pt"
    result = run(flags.replace("--deter-size 32", "--deter-size 64"), tmp_path)
    line = assert_one_error_line(result, tmp_path, "--resume checkpoint.pt", "--deter-size 32", "pass the same values")
    assert "64" in line and (tmp_path / "checkpoint.pt").read_bytes() == before
