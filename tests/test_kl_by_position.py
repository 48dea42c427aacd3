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
    for s in starts:
        assert is_first[s] and not is_first[s + 1 : s + 12].any() or not is_first[s : s + 12].any()
    assert kl_by_position.window_starts(is_first, 41).size == 0


def test_reads_a_checkpoint_with_its_replay(tmp_path: Path):
    args = script.Args(batch_length=8, cnn_depth=4, deter_size=16, hidden_size=16, stoch_size=4, classes=4, mlp_units=16)
    wm = script.WorldModel((3, 64, 64), 1, args)
    steps = 60  # two episodes of 30 stored steps, in env 0
    is_first = torch.zeros(steps, 1, dtype=torch.bool)
    is_first[[0, 30]] = True
    replay = dict(
        added=steps,
        obs=torch.randint(0, 256, (steps, 1, 3, 64, 64), dtype=torch.uint8),
        action=torch.rand(steps, 1, 1) * 2 - 1,
        reward=torch.rand(steps, 1),
        is_first=is_first,
        is_terminal=torch.zeros(steps, 1, dtype=torch.bool),
    )
    path = tmp_path / "checkpoint.pt"
    torch.save(dict(script="dreamer_v2_dmc.py", args=asdict(args), wm=wm.state_dict(), replay=replay, global_step=120), path)
    out = subprocess.run([sys.executable, str(TOOL), str(path), "--windows", "6", "--batch", "4", "--every", "4"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [0, 4, 8, 12]  # positions 0..2T-1, every 4th
    halves = [line for line in out.stdout.splitlines() if line.startswith(("zero start", "carried state"))]
    assert len(halves) == 2 and all(np.isfinite(float(h.split()[-3])) for h in halves), out.stdout
    too_many = subprocess.run([sys.executable, str(TOOL), str(path), "--windows", "100"], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
    assert too_many.returncode != 0 and "windows of 16 steps inside an episode; pass --windows 30 or fewer" in too_many.stderr
