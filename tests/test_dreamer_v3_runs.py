"""dreamer_v3_atari.py run as a subprocess with tiny networks on the real ALE/Pong-v5: 1 env fp32 and 2 envs bf16 (with
video, saved model, TensorBoard tags and the realised replay ratio), torchrun with 2 processes, SIGTERM then --resume,
and the catalogue of bad input, each of which must end with one clear line on stderr, a non-zero exit and no
runs/ directory. Every run happens in its own temporary directory (runs/ and videos/ land there) with the repo root on
PYTHONPATH for `from ratio import Ratio`. DREAMER_V3=<path> runs a fork instead of dreamer_v3_atari.py (tests/helpers.py,
docs/forking.md)."""

import functools
import glob
import math
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests import helpers
from tests.helpers import (
    CUDA_WARNING,
    assert_ok,
    assert_within_5_percent,
    env_vars,
    error_lines,
    only_run_dir,
    progress_ratio,
    tensorboard,
)

pytest.importorskip("ale_py")
pytest.importorskip("tensorboard")

SCRIPT = helpers.script_path("v3")  # dreamer_v3_atari.py, or the fork that DREAMER_V3 names
NAME = SCRIPT.name  # what the script calls itself in its messages and records in its checkpoints
command = functools.partial(helpers.command, SCRIPT)
run = functools.partial(helpers.run, SCRIPT)
assert_one_error_line = functools.partial(helpers.assert_one_error_line, SCRIPT)
run_until_training_then_sigterm = functools.partial(helpers.run_until_training_then_sigterm, SCRIPT)
TINY = (
    "--learning-starts 128 --batch-size 4 --batch-length 16 --deter-size 32 --hidden-size 32 --cnn-depth 4 "
    "--mlp-units 32 --mlp-layers 1 --stoch-size 4 --classes 4 --eval-episodes 1 --log-every 100"
)
RATIO = 0.5
TAGS = [
    "charts/SPS",
    "charts/replay_ratio",
    "charts/gradient_steps",
    "losses/image",
    "losses/reward",
    "losses/cont",
    "losses/dyn",
    "losses/rep",
    "losses/kl",
    "losses/actor",
    "losses/critic",
    "losses/prior_entropy",
    "losses/post_entropy",
    "charts/return_scale",
    "eval/episodic_return",
    "actions/entropy",
    "actions/top_share",
]


def check_tags_and_ratio(run_dir: Path, target: float = RATIO):
    scalars, images = tensorboard(run_dir)
    missing = [tag for tag in TAGS if tag not in scalars]
    assert not missing, f"missing tags {missing}; present: {sorted(scalars)}"
    assert "charts/dream" in images, images
    assert all(math.isfinite(v) for tag in TAGS for v in scalars[tag])
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], target)
    assert scalars["charts/gradient_steps"][-1] > 0


# ---------------------------------------------------------------- runs on Pong: 1 env fp32 and 2 envs bf16


@pytest.fixture(scope="module")
def pong_runs(tmp_path_factory) -> dict:
    """Both runs at once: each uses one core. The fp32 run asks for --cuda, to see the CPU fallback warning."""
    flags = {
        "fp32": f"{TINY} --total-timesteps 400 --replay-ratio {RATIO} --video-every 20 --cuda",
        "bf16": f"{TINY} --total-timesteps 400 --replay-ratio {RATIO} --video-every 20 --num-envs 2 --precision bf16 "
        "--capture-video --save-model --no-cuda",
    }
    procs = {}
    for name, f in flags.items():
        cwd = tmp_path_factory.mktemp(name)
        procs[name] = (cwd, subprocess.Popen(command(f), cwd=cwd, env=env_vars(), stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True))  # fmt: skip
    results = {}
    for name, (cwd, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        results[name] = (cwd, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return results


def test_one_env_fp32(pong_runs):
    cwd, result = pong_runs["fp32"]
    assert_ok(result)
    assert "replay ratio 0.5 (gradient steps per policy step, global) | world size 1 | batch 4 x 16 per rank" in result.stdout
    assert "Hafner train ratio 32 (replayed steps per policy step)" in result.stdout  # 0.5 x 4 x 16
    assert "precision 32" in result.stdout
    progress = r"^step 400/400 \(100%\) \| SPS [0-9.]+ \| gradient steps \d+ \| replay ratio [0-9.]+ \| ETA "
    assert re.search(progress, result.stdout, re.M), result.stdout
    assert_within_5_percent(progress_ratio(result.stdout), RATIO)
    check_tags_and_ratio(only_run_dir(cwd))
    assert (only_run_dir(cwd) / "checkpoint.pt").is_file()


def test_cuda_flag_falls_back_to_cpu_with_a_warning(pong_runs):
    cwd, result = pong_runs["fp32"]  # run with an explicit --cuda
    assert_ok(result)
    if torch.cuda.is_available():
        assert CUDA_WARNING not in result.stderr and "device cuda" in result.stdout
    else:
        assert CUDA_WARNING in result.stderr.splitlines()
        assert "device cpu" in result.stdout


def test_two_envs_bf16_video_and_saved_model(pong_runs):
    v3 = helpers.load_script("v3")

    cwd, result = pong_runs["bf16"]
    assert_ok(result)
    assert "precision bf16" in result.stdout and "world size 1" in result.stdout
    assert CUDA_WARNING not in result.stderr
    run_dir = only_run_dir(cwd)
    assert_within_5_percent(progress_ratio(result.stdout), RATIO)
    check_tags_and_ratio(run_dir)
    videos = glob.glob(str(cwd / "videos" / run_dir.name / "*.mp4"))
    assert videos and all(os.path.getsize(v) > 0 for v in videos), videos
    model_path = run_dir / f"{SCRIPT.stem}.cleanrl_model"  # --exp-name defaults to the script's name
    assert f"model saved to runs/{run_dir.name}/{SCRIPT.stem}.cleanrl_model" in result.stdout
    saved = torch.load(model_path, weights_only=False)
    assert saved["script"] == NAME and saved["global_step"] == 400
    # the saved weights load into freshly built networks of the saved sizes
    args = v3.Args(**saved["args"])
    action_size = saved["actor"]["net.out.weight"].shape[0]
    assert action_size == 6  # Pong's minimal action set
    feat_size = args.deter_size + args.stoch_size * args.classes
    v3.WorldModel((3, 64, 64), action_size, args).load_state_dict(saved["wm"])
    v3.Actor(feat_size, action_size, args.mlp_units, args.mlp_layers, args.unimix).load_state_dict(saved["actor"])
    v3.Critic(feat_size, args.reward_bins, args.mlp_units, args.mlp_layers).load_state_dict(saved["critic"])


# ---------------------------------------------------------------- torchrun


TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> tuple:
    cwd = tmp_path_factory.mktemp("torchrun")
    return cwd, run(f"{TINY} --total-timesteps 400 --replay-ratio {RATIO} --no-cuda", cwd, TORCHRUN)


def test_torchrun_two_processes(torchrun_run):
    tmp_path, result = torchrun_run
    assert_ok(result)
    assert "world size 2 | batch 4 x 16 per rank, 8 x 16 global" in result.stdout
    assert "weights identical on all 2 ranks" in result.stdout
    assert result.stdout.count("step 400/400 (100%)") == 1  # only rank 0 logs
    assert_within_5_percent(progress_ratio(result.stdout), RATIO)
    run_dir = only_run_dir(tmp_path)  # both ranks share rank 0's run directory
    scalars, _ = tensorboard(run_dir)
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], RATIO)  # global: gradient steps of all ranks
    assert (run_dir / "checkpoint.pt").is_file() and (run_dir / "checkpoint.rank1.pt").is_file()
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert checkpoint["global_step"] == 400 and checkpoint["world_size"] == 2
    assert checkpoint["replay"]["added"] == 200  # each rank's one env collected half of the policy steps


def test_torchrun_resume(torchrun_run, tmp_path: Path):
    """A 2-process run resumes under torchrun from rank 0's path (each rank reads its own file beside it) and ends with
    identical weights; resuming it with one process, or with a rank file from another step, is refused with one line."""
    shutil.copytree(torchrun_run[0] / "runs", tmp_path / "runs")
    run_dir = only_run_dir(tmp_path)
    shutil.copy(run_dir / "checkpoint.rank1.pt", tmp_path / "rank1_at_400.pt")

    def flags(total: int) -> str:
        return f"{TINY} --total-timesteps {total} --replay-ratio {RATIO} --no-cuda --resume {run_dir / 'checkpoint.pt'}"

    one = run(flags(600), tmp_path)
    assert one.returncode != 0 and "Traceback" not in one.stderr
    assert error_lines(one) == [f"{NAME}: error: --resume {run_dir / 'checkpoint.pt'}: the run used 2 processes; "
                                "resume with the same number"]  # fmt: skip
    resumed = run(flags(600), tmp_path, TORCHRUN)
    assert_ok(resumed)
    assert f"resumed {run_dir.name} at policy step 400" in resumed.stdout
    assert "weights identical on all 2 ranks" in resumed.stdout and "step 600/600 (100%)" in resumed.stdout
    for name in ("checkpoint.pt", "checkpoint.rank1.pt"):
        assert torch.load(run_dir / name, weights_only=False)["global_step"] == 600, name
    shutil.copy(tmp_path / "rank1_at_400.pt", run_dir / "checkpoint.rank1.pt")  # rank 1's file from another step
    stale = run(flags(800), tmp_path, TORCHRUN)
    assert stale.returncode != 0 and "checkpoint.rank1.pt is from policy step 400" in stale.stdout + stale.stderr
    assert "the checkpoints of all ranks must come from the same step" in stale.stdout + stale.stderr


# ---------------------------------------------------------------- SIGTERM and --resume

RESUME_RATIO = 0.1  # fewer gradient steps: the run is 3x longer than the others
RESUME_FLAGS = (
    f"{TINY} --num-envs 2 --checkpoint-buffer --total-timesteps 1200 --checkpoint-every 200 --replay-ratio {RESUME_RATIO} "
    "--no-cuda"
)


def test_sigterm_then_resume(tmp_path: Path):
    killed = run_until_training_then_sigterm(RESUME_FLAGS, tmp_path)
    assert_ok(killed)
    stopped = re.search(r"^stopped by signal at policy step (\d+); checkpoint written to (\S+)$", killed.stdout, re.M)
    assert stopped, killed.stdout
    kill_step, path = int(stopped[1]), stopped[2]
    assert f"resume with: python {NAME} --resume {path} (plus the same flags)" in killed.stdout
    assert 128 < kill_step < 1200
    run_dir = only_run_dir(tmp_path)
    assert (tmp_path / path).resolve() == (run_dir / "checkpoint.pt").resolve()
    shutil.copy(tmp_path / path, tmp_path / "at_kill.pt")  # the resumed run overwrites checkpoint.pt
    at_kill = torch.load(tmp_path / "at_kill.pt", weights_only=False)
    assert at_kill["global_step"] == kill_step and at_kill["gradient_steps"] > 0
    replay = at_kill["replay"]
    assert replay["added"] * 2 == at_kill["global_step"]  # the buffer holds every step collected before the kill
    assert replay["obs"].shape[:2] == (replay["added"], 2)
    assert (replay["obs"].flatten(2).amax(-1) > 0).all()  # every slot holds a real Pong frame, none is left empty

    resumed = run(f"{RESUME_FLAGS} --resume {path}", tmp_path)
    assert_ok(resumed)
    assert f"resumed {run_dir.name} at policy step {kill_step}, {at_kill['gradient_steps']} gradient steps" in resumed.stdout
    assert re.search(r"^step 1200/1200 \(100%\)", resumed.stdout, re.M)
    assert only_run_dir(tmp_path) == run_dir  # the same run directory and TensorBoard log
    final = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert final["global_step"] == 1200
    assert final["replay"]["added"] * 2 == 1200  # the steps from before the kill were carried over
    assert torch.equal(final["replay"]["obs"][: replay["added"]], replay["obs"])
    assert_within_5_percent(final["gradient_steps"] / final["train_policy_steps"], RESUME_RATIO)
    assert_within_5_percent(progress_ratio(resumed.stdout), RESUME_RATIO)
    scalars, _ = tensorboard(run_dir)
    assert_within_5_percent(scalars["charts/replay_ratio"][-1], RESUME_RATIO)


# ---------------------------------------------------------------- non-finite losses


@pytest.fixture(scope="module")
def blow_up(tmp_path_factory) -> tuple:
    cwd = tmp_path_factory.mktemp("blow_up")
    return cwd, run(f"{TINY} --total-timesteps 400 --model-lr 1e30 --no-cuda", cwd)


def test_non_finite_loss_stops_with_a_checkpoint(blow_up):
    cwd, result = blow_up
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output, output
    lines = error_lines(result)
    assert len(lines) == 1, lines
    match = re.fullmatch(
        re.escape(NAME) + r": error: the (image loss|reward loss|cont loss|dyn loss|rep loss|actor loss|critic loss|"
        r"world model gradient) became non-finite at gradient step \d+ \(policy step \d+\); the last checkpoint, from "
        r"policy step \d+, is (\S+); lower the learning rates",
        lines[0],
    )
    assert match, lines[0]
    print(lines[0])
    assert (cwd / match[2]).resolve() == (only_run_dir(cwd) / "checkpoint.pt").resolve()
    checkpoint = torch.load(cwd / match[2], weights_only=False)
    assert checkpoint["script"] == NAME
    assert all(torch.isfinite(v).all() for k in ("wm", "actor", "critic") for v in checkpoint[k].values())


def test_non_finite_checkpoint_is_from_before_the_blow_up(blow_up):
    """A non-finite loss stops the run with a checkpoint from before the blow-up. With --model-lr 1e30 the first world
    model update moves every weight by about 1e30; a checkpoint from before it has small weights and no optimiser step."""
    cwd, result = blow_up
    checkpoint = torch.load(only_run_dir(cwd) / "checkpoint.pt", weights_only=False)
    assert max(v.abs().max().item() for v in checkpoint["wm"].values() if v.is_floating_point()) < 1e3
    steps = {int(s["step"]) for s in checkpoint["model_opt"]["state"].values()}
    assert steps <= {checkpoint["gradient_steps"]}


# ---------------------------------------------------------------- bad input: one clear line, non-zero exit, no runs/
# A missing ROM or renderer cannot be produced here: ale-py ships every ROM inside its wheel and renders in software, so
# gym.make of a real ALE id always succeeds. The closest reachable case is a game that does not exist (ALE/NotAGame-v5),
# refused with close matches; a ROM that fails to load goes through the same one-line `could not create --env-id` branch.

BAD_INPUT = {
    "unknown_env_close_match": ("--env-id ALE/Pongg-v5", ["unknown --env-id 'ALE/Pongg-v5'", "did you mean ALE/Pong-v5"]),
    "unknown_game": ("--env-id ALE/NotAGame-v5", ["unknown --env-id 'ALE/NotAGame-v5'", "did you mean"]),
    "no_image_observations": ("--env-id CartPole-v1", ["--env-id CartPole-v1", "needs uint8 image observations"]),
    "continuous_without_images": ("--env-id MountainCarContinuous-v0", ["needs uint8 image observations"]),
    "continuous_actions": ("--env-id tests.dummy_envs:ContinuousPixels-v0", ["Box action space", "needs discrete actions"]),
    "negative_ratio": ("--replay-ratio -1", ["--replay-ratio", "finite number >= 0", "got -1.0"]),
    "nan_ratio": ("--replay-ratio nan", ["--replay-ratio", "finite number >= 0", "got nan"]),
    "absurd_ratio": ("--replay-ratio 1024", ["--replay-ratio 1024", "Hafner's train ratio"]),
    "batch_longer_than_buffer": ("--total-timesteps 100 --batch-length 128 --learning-starts 128",
                                 ["--batch-length 128 is longer than the replay holds", "100 steps"]),
    "learning_starts_too_short": ("--learning-starts 10 --batch-length 16",
                                  ["--learning-starts 10 is shorter than one sequence", "raise it"]),
    "resume_missing": ("--resume nowhere/checkpoint.pt", ["--resume nowhere/checkpoint.pt: no such file"]),
    "resume_other_script": ("--resume other.pt", ["--resume other.pt", "belongs to other.py"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def bad_input_results(request, tmp_path_factory) -> dict:
    """Each case in its own empty directory; they run concurrently since each spends its time importing torch. Only the
    cases this session runs (-k can choose a few)."""
    dirs = {name: tmp_path_factory.mktemp(name) for name in helpers.selected_cases(request, "test_bad_input")}
    if "resume_other_script" in dirs:
        torch.save({"script": "other.py", "wm": {}}, dirs["resume_other_script"] / "other.pt")
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run, f"{BAD_INPUT[name][0]} --no-cuda", dirs[name], (), 120) for name in dirs}
        return {name: (dirs[name], future.result()) for name, future in futures.items()}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input(case: str, bad_input_results):
    cwd, result = bad_input_results[case]
    assert_one_error_line(result, cwd, *BAD_INPUT[case][1])


def test_resume_truncated_checkpoint(pong_runs, tmp_path: Path):
    source = only_run_dir(pong_runs["fp32"][0]) / "checkpoint.pt"
    data = source.read_bytes()
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    result = run(f"{TINY} --total-timesteps 400 --replay-ratio {RATIO} --no-cuda --resume truncated.pt", tmp_path)
    assert_one_error_line(result, tmp_path, "--resume truncated.pt", "truncated or corrupt")
    assert (tmp_path / "truncated.pt").read_bytes() == data[: len(data) // 2]  # left as it was


def test_resume_with_another_model_size(pong_runs, tmp_path: Path):
    shutil.copy(only_run_dir(pong_runs["fp32"][0]) / "checkpoint.pt", tmp_path / "checkpoint.pt")
    before = (tmp_path / "checkpoint.pt").read_bytes()
    flags = f"{TINY} --total-timesteps 400 --replay-ratio {RATIO} --no-cuda --resume checkpoint.pt".replace(
        "--deter-size 32", "--deter-size 64"
    )
    result = run(flags, tmp_path)
    line = assert_one_error_line(result, tmp_path, "--resume checkpoint.pt", "--deter-size 32", "pass the same values")
    assert "64" in line
    assert (tmp_path / "checkpoint.pt").read_bytes() == before
