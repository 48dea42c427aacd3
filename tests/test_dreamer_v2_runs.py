"""dreamer_v2_atari.py run as a subprocess with tiny networks on the real ALE/Pong-v5: the users' command shape
(`--replay-ratio 0.5`), its TensorBoard tags and realised replay ratio, SIGTERM then --resume, and torchrun with 2 processes.
Each run is scaled down in steps and sizes so that the file finishes in about a minute on 2 CPU cores."""

import glob
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(ROOT / "dreamer_v2_atari.py")
TINY = "--deter-size 32 --hidden-size 32 --cnn-depth 4 --mlp-units 32 --mlp-layers 1 --stoch-size 4 --classes 4"
SHORT = "--learning-starts 128 --batch-size 4 --batch-length 16 --imagination-horizon 5 --log-every 100 --no-cuda"

pytest.importorskip("ale_py")


def env_vars() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def run(flags: str, cwd: Path, launcher: tuple = (), timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *launcher, SCRIPT, *flags.split()]
    result = subprocess.run(cmd, cwd=cwd, env=env_vars(), capture_output=True, text=True, timeout=timeout)
    errors = "\n".join(line for line in result.stderr.splitlines() if "error" in line.lower() or "Error" in line)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout[-2000:]}\n{errors[-4000:]}"
    return result


def realised_ratio(stdout: str) -> float:
    return float(re.findall(r"\| replay ratio ([0-9.]+) \|", stdout)[-1])


def scalars(run_dir: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    ea.Reload()
    return {tag: [e.value for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]} | {
        tag: None for tag in ea.Tags()["images"]
    }


def only_run_dir(cwd: Path) -> Path:
    dirs = glob.glob(str(cwd / "runs" / "*"))
    assert len(dirs) == 1, dirs
    return Path(dirs[0])


def test_user_command_replay_ratio_half(tmp_path: Path):
    """`python dreamer_v2_atari.py --replay-ratio 0.5`, scaled down: default precision (bf16), default env ALE/Pong-v5."""
    result = run(f"--replay-ratio 0.5 --total-timesteps 400 {SHORT} {TINY} --video-every 40", tmp_path)
    assert "replay ratio 0.5 (gradient steps per policy step, global) | world size 1 | batch 4 x 16" in result.stdout
    assert "Hafner train ratio 32 (replayed steps per policy step)" in result.stdout
    assert "precision bf16" in result.stdout
    assert abs(realised_ratio(result.stdout) / 0.5 - 1) < 0.05
    tags = scalars(only_run_dir(tmp_path))
    losses = "image reward discount kl kl_prior kl_post prior_entropy post_entropy model actor critic model_grad_norm"
    losses += " actor_grad_norm critic_grad_norm actor_entropy imagined_return imagined_reward value target_value"
    expected = [f"losses/{k}" for k in losses.split()]
    expected += ["charts/SPS", "charts/replay_ratio", "charts/gradient_steps", "eval/episodic_return", "charts/dream"]
    assert not set(expected) - set(tags), set(expected) - set(tags)
    assert abs(tags["charts/replay_ratio"][-1] / 0.5 - 1) < 0.05
    assert tags["charts/gradient_steps"][-1] >= 0.5 * (400 - 128) - 1


def test_sigterm_then_resume(tmp_path: Path):
    """Kill a run with SIGTERM while it trains, then --resume it: it ends at the right step, the replay ratio still on
    target, and with --checkpoint-buffer the resumed buffer holds every step collected before the kill."""
    flags = f"--replay-ratio 0.25 --total-timesteps 640 {SHORT} {TINY} --precision 32 --checkpoint-buffer"
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, *flags.split()],
        cwd=tmp_path,
        env=env_vars(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, deadline = [], time.time() + 240
    for line in proc.stdout:  # wait until it trains (the progress line reports gradient steps)
        lines.append(line)
        if re.search(r"gradient steps [1-9]", line) or time.time() > deadline:
            break
    proc.send_signal(signal.SIGTERM)
    out = "".join(lines) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out[-3000:]
    assert "stopped by signal at policy step" in out and "resume with:" in out, out[-3000:]
    run_dir = only_run_dir(tmp_path)
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    killed_at = checkpoint["global_step"]
    assert 128 < killed_at < 640 and checkpoint["gradient_steps"] > 0
    assert checkpoint["replay"]["added"] == killed_at and len(checkpoint["replay"]["obs"]) == killed_at

    result = run(f"{flags} --resume {run_dir / 'checkpoint.pt'}", tmp_path)
    assert f"resumed {run_dir.name} at policy step {killed_at}" in result.stdout
    assert only_run_dir(tmp_path) == run_dir  # the same run directory and TensorBoard log
    final = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert final["global_step"] == 640
    assert final["train_policy_steps"] == 640 - 127  # training starts with the step after the 128th
    assert abs(final["gradient_steps"] / final["train_policy_steps"] / 0.25 - 1) < 0.05
    assert abs(realised_ratio(result.stdout) / 0.25 - 1) < 0.05
    assert final["replay"]["added"] == 640  # nothing collected before the kill was lost
    steps = scalars(run_dir)["charts/replay_ratio"]
    assert len(steps) == 640 // 100 - 1  # logged at 200, 300, ... 600 across both processes, none twice


def test_torchrun_two_processes(tmp_path: Path):
    """torchrun --nproc_per_node 2 on the CPU (gloo): it finishes, the global replay ratio is on target, and the script's
    end-of-run check finds the same weights (float64 sums and sums of squares of every tensor) on both ranks."""
    flags = f"--replay-ratio 0.5 --total-timesteps 400 {SHORT} {TINY} --precision 32"
    launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    result = run(flags, tmp_path, launcher=launcher)
    assert "world size 2 | batch 4 x 16 per rank, 8 x 16 global | Hafner train ratio 32" in result.stdout
    assert abs(realised_ratio(result.stdout) / 0.5 - 1) < 0.05
    assert "weights identical on all 2 ranks" in result.stdout
    checkpoint = torch.load(only_run_dir(tmp_path) / "checkpoint.pt", weights_only=False)
    assert checkpoint["global_step"] == 400 and checkpoint["world_size"] == 2
