"""`--track --capture-video`, the most common CleanRL pair, for every script: Weights and Biases in offline mode
(WANDB_MODE=offline: nothing leaves the machine), agent videos of Catch, a run shorter than --log-every, and
--eval-episodes 0. Each run must exit 0 with no traceback, hand its videos to wandb (they land in the offline run's
media folder), write its scalars at its last step although that step is not a multiple of --log-every, and evaluate
nothing. The three scripts run at once, one core each, each in its own temporary directory."""

import glob
import os
import subprocess

import pytest

from tests.helpers import command, env_vars

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

COMMON = (
    "--env-id tests.catch_env:Catch-v0 --track --capture-video --no-cuda --total-timesteps 300 --learning-starts 128 "
    "--batch-size 4 --batch-length 16 --deter-size 32 --hidden-size 32 --cnn-depth 4 --mlp-units 32 --stoch-size 4 "
    "--imagination-horizon 5 --replay-ratio 0.25 --log-every 1000 --eval-episodes 0 --video-every 0"
)
SIZES = {
    "dreamer_v1_atari.py": "--reward-layers 1 --discount-layers 1 --actor-layers 1 --critic-layers 1 --pretrain 1",
    "dreamer_v2_atari.py": "--mlp-layers 1 --classes 4",
    "dreamer_v3_atari.py": "--mlp-layers 1 --classes 4",
}


@pytest.fixture(scope="module")
def tracked_runs(tmp_path_factory) -> dict:
    env = env_vars(WANDB_MODE="offline", WANDB_SILENT="true")
    procs = {}
    for script, sizes in SIZES.items():
        cwd = tmp_path_factory.mktemp(script[: -len(".py")])
        procs[script] = (cwd, subprocess.Popen(command(script, f"{COMMON} {sizes}"), cwd=cwd, env=env,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    results = {}
    for script, (cwd, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        results[script] = (cwd, proc.returncode, stdout, stderr)
    return results


@pytest.mark.parametrize("script", list(SIZES))
def test_track_and_capture_video(script: str, tracked_runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cwd, returncode, stdout, stderr = tracked_runs[script]
    assert returncode == 0 and "Traceback" not in stderr, f"{stdout[-2000:]}\n{stderr[-4000:]}"
    (run_dir,) = glob.glob(str(cwd / "runs" / "*"))
    recorded = glob.glob(str(cwd / "videos" / os.path.basename(run_dir) / "*.mp4"))
    uploaded = glob.glob(str(cwd / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "**" / "*.mp4"), recursive=True)
    assert recorded and len(uploaded) == len(recorded), (recorded, uploaded)
    # 300 policy steps with --log-every 1000: the scalars are written at the last step
    ea = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    ea.Reload()
    scalars = ea.Tags()["scalars"]
    for tag in ("charts/SPS", "charts/replay_ratio", "charts/gradient_steps", "losses/model", "losses/actor"):
        assert tag in scalars and ea.Scalars(tag)[-1].step == 300, (tag, sorted(scalars))
    assert "step 300/300 (100%)" in stdout
    # --eval-episodes 0: no evaluation
    assert "eval/episodic_return" not in scalars and "eval at step" not in stdout
