"""benchmarks/parity/kl_by_position.py: the windows it filters lie inside one episode each, and it reads a checkpoint
of dreamer_v2_dmc.py written with --checkpoint-buffer."""

import importlib.util
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

import dreamer_v2_dmc as script

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "benchmarks" / "parity" / "kl_by_position.py"
spec = importlib.util.spec_from_file_location("kl_by_position", TOOL)
kl_by_position = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kl_by_position)


def test_windows_lie_inside_one_episode():
    is_first = np.zeros(100, bool)
    is_first[[3, 40, 50, 90]] = True  # episodes of 37, 10, 40 and 10 steps; steps 0-2 belong to an overwritten one
    starts = kl_by_position.window_starts(is_first, 12)
    assert starts.tolist() == list(range(3, 29)) + list(range(50, 79))
    assert kl_by_position.window_starts(is_first, 41).size == 0


def test_reads_a_checkpoint_with_its_replay(tmp_path: Path):
    args = script.Args(batch_length=8, cnn_depth=4, deter_size=16, hidden_size=16, stoch_size=4, classes=4, mlp_units=16)
    wm = script.WorldModel((3, 64, 64), 1, args)
    steps = 60  # two episodes of 30 stored steps, in env 0
    rb = script.SequenceReplay(steps, 1, (3, 64, 64), 1, 4, args.batch_length, True, 0.0625, 0)
    for t in range(steps):
        obs = torch.randint(0, 256, (1, 3, 64, 64), dtype=torch.uint8).numpy()
        rb.add(obs, np.random.uniform(-1, 1, (1, 1)), np.random.rand(1), np.array([t % 30 == 0]), np.zeros(1, bool))
    replay = rb.state_dict(with_data=True)
    carry = ({k: v.clone() for k, v in wm.rssm.initial(4).items()}, torch.zeros(4, 1))
    args.batch_size, args.total_timesteps = 4, steps
    path = tmp_path / "checkpoint.pt"
    checkpoint = dict(script="dreamer_v2_dmc.py", args=asdict(args), wm=wm.state_dict(), replay=replay, carry=carry)
    torch.save(dict(checkpoint, global_step=120), path)
    flags = ["--windows", "6", "--batch", "4", "--every", "4", "--batches", "3"]
    out = subprocess.run([sys.executable, str(TOOL), str(path), *flags], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(" ")]  # the table of positions
    assert [int(r[0]) for r in rows] == [0, 4, 8, 12]  # positions 0..2T-1, every 4th
    halves = [line for line in out.stdout.splitlines() if line.startswith(("zero start", "carried state"))]
    assert len(halves) == 2 and all(np.isfinite(float(h.split()[-3])) for h in halves), out.stdout
    sampled = [line for line in out.stdout.splitlines() if line.startswith("3 batches as")]
    assert [line.split()[3] for line in sampled] == ["--tbptt", "--no-tbptt"], out.stdout
    assert all(np.isfinite(float(line.split("mean KL ")[1].split()[0])) for line in sampled)
    too_many = subprocess.run([sys.executable, str(TOOL), str(path), "--windows", "100"], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
    assert too_many.returncode != 0 and "windows of 16 steps inside an episode; pass --windows 30 or fewer" in too_many.stderr
