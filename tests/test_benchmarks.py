"""benchmarks/speed.py runs every script's gradient step, FLOP count, acting and env, and prints its table (tiny sizes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def speed(*flags: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "benchmarks/speed.py", "--tiny", "--warmup", "0", "--steps", "1", "--act-steps", "2", *flags],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),  # the suite runs two workers on two cores
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_speed_table_has_a_row_per_script_and_precision():
    out = speed()
    rows = [line for line in out.stdout.splitlines() if re.match(r"\| (v1|v2|v3|v2-dmc) \|", line)]
    assert [r.split("|")[1:3] for r in rows] == [
        [f" {s} ", f" {p} "] for s in ("v1", "v2", "v3", "v2-dmc") for p in ("32", "bf16")
    ]
    for row in rows:
        cells = [c.strip().rstrip("x%") for c in row.strip("|").split("|")[3:]]
        total, world_model, behaviour, _, gflop, _, _, act, env = [float(c) for c in cells]
        assert total > 0 and abs(total - world_model - behaviour) < 0.02 and gflop > 0 and act > 0 and env > 0, row


def test_speed_without_flops_and_env():
    """--no-flops --no-env (a machine without the envs, such as a GPU box with only torch): dashes in those columns."""
    out = speed("--scripts", "v3", "--no-flops", "--no-env")
    rows = [line for line in out.stdout.splitlines() if line.startswith("| v3 ")]
    assert len(rows) == 2, rows
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[3]) > 0 and cells[7:10] == ["-", "-", "-"] and float(cells[10]) > 0 and cells[11] == "-", row
