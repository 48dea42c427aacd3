"""`--track --capture-video`, the most common CleanRL pair, for the three Atari scripts (dreamer_v2_dmc.py shares their
`Run.upload_videos` and `finish_eval_model`: the plumbing section is the same text, tests/test_plumbing.py): Weights
and Biases in offline mode (WANDB_MODE=offline: nothing leaves the machine), agent videos of Catch, a run shorter than
--log-every, and --eval-episodes 0. Each run must exit 0 with no traceback, hand its videos to wandb (they land in the
offline run's media folder), write its scalars at its last step although that step is not a multiple of --log-every,
and evaluate nothing. The three scripts run at once, one core each, each in its own temporary directory. Each run saves
its model (--save-model), which the --eval-model test then watches play."""

import glob
import os
import subprocess

import pytest

from tests.helpers import assert_one_error_line, command, env_vars, run, tensorboard

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

COMMON = (
    "--env-id tests.catch_env:Catch-v0 --track --capture-video --no-cuda --total-timesteps 300 --learning-starts 128 "
    "--batch-size 4 --batch-length 16 --deter-size 32 --hidden-size 32 --cnn-depth 4 --mlp-units 32 --stoch-size 4 "
    "--imagination-horizon 5 --replay-ratio 0.25 --log-every 1000 --eval-episodes 0 --video-every 0 --save-model"
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


def always_right_returns(seed: int, episodes: int) -> list:
    """Catch returns of a policy that always moves right, with evaluate()'s seeding (the first reset seeded)."""
    import gymnasium as gym

    import tests.catch_env  # noqa: F401  registers Catch-v0

    env, returns = gym.make("Catch-v0"), []
    for episode in range(episodes):
        env.reset(seed=seed if episode == 0 else None)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(2)
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return returns


@pytest.mark.parametrize("script", list(SIZES))
def test_eval_model(script: str, tracked_runs, tmp_path):
    """--eval-model loads a saved model and plays it, records and uploads its videos, logs eval/ and trains nothing,
    in a run directory of its own, also for a resumed run's model. The saved actor is rewritten to always move right, so
    the returns show that the file's weights were the ones playing (an unloaded or retrained actor would not reproduce
    them)."""
    import torch

    (model,) = glob.glob(str(tracked_runs[script][0] / "runs" / "*" / "*.cleanrl_model"))
    saved = torch.load(model, weights_only=False)
    out = [k for k, v in saved["actor"].items() if k.endswith("weight") and v.shape[0] == 3][-1]  # the output layer
    saved["actor"][out].zero_()
    saved["actor"][out[: -len("weight")] + "bias"].copy_(torch.tensor([0.0, 0.0, 10.0]))
    # as a resumed run saves it: its flags name the checkpoint it resumed from, which the evaluation must not load (nor
    # write into that run's directory)
    saved["args"]["resume"] = "runs/gone/checkpoint.pt"
    right = tmp_path / "right.cleanrl_model"
    torch.save(saved, right)
    env = env_vars(WANDB_MODE="offline", WANDB_SILENT="true")
    flags = f"--eval-model {right} --eval-episodes 4 --eval-greedy --seed 7 --capture-video --track --no-cuda"
    result = subprocess.run(command(script, flags), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "*"))
    assert "-eval__7__" in run_dir and not glob.glob(f"{run_dir}/*.pt"), os.listdir(run_dir)  # no checkpoint, no training
    scalars, _ = tensorboard(run_dir)
    expected = always_right_returns(7, 4)
    assert scalars["eval/episodic_return"] == expected and not any(t.startswith("losses/") for t in scalars), scalars
    assert f"(policy step 300) on tests.catch_env:Catch-v0: mean return {sum(expected) / 4:.2f}" in result.stdout
    recorded = glob.glob(str(tmp_path / "videos" / os.path.basename(run_dir) / "*.mp4"))
    uploaded = glob.glob(
        str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "**" / "*.mp4"), recursive=True
    )
    assert recorded and len(uploaded) == len(recorded), (recorded, uploaded)


@pytest.mark.parametrize("script", list(SIZES))
def test_eval_model_bad_input(script: str, tracked_runs, tmp_path):
    """One error line each and nothing on disk: a missing file, another script's model, no episodes to play, --resume."""
    other = next(s for s in SIZES if s != script)
    (other_model,) = glob.glob(str(tracked_runs[other][0] / "runs" / "*" / "*.cleanrl_model"))
    (model,) = glob.glob(str(tracked_runs[script][0] / "runs" / "*" / "*.cleanrl_model"))
    cases = [
        (f"--eval-model {tmp_path}/none.cleanrl_model", "no such file (pass the runs/<run_name>/<exp_name>.cleanrl_model"),
        (f"--eval-model {other_model}", f"this file belongs to {other}, not {script}"),
        (f"--eval-model {model} --eval-episodes 0", "--eval-model plays --eval-episodes episodes: pass a positive number"),
        (f"--eval-model {model} --resume {model}", "run it with python and without --resume"),
    ]
    for flags, needle in cases:
        assert_one_error_line(script, run(script, flags + " --no-cuda", tmp_path), tmp_path, needle)
