"""benchmarks/speed.py runs every script's gradient step, FLOP count, acting and env, and prints its table (tiny sizes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

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


def test_speed_where_bf16_is_emulated(monkeypatch, capsys):
    """On a CPU without native bf16 the header says so and the bf16 row runs one step, no warm-up, so it ends in minutes."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    calls, build = {"32": 0, "bf16": 0}, speed.build

    def counting_build(name, precision, bench):
        setup = build(name, precision, bench)
        world_model = setup["world_model"]

        def counted():
            calls[precision] += 1
            return world_model()

        return dict(setup, world_model=counted)

    monkeypatch.setattr(speed, "build", counting_build)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        speed.main(
            speed.Bench(scripts=["v3"], warmup=2, steps=3, act_steps=2, flops=False, env=False, device="cpu", tiny=True)
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "native bf16 no (emulated)" in out.splitlines()[0]
    assert "bf16 is emulated on this machine: its rows are one timed step each, with no warm-up" in out
    assert calls == {"32": 5, "bf16": 1}
    assert [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| v3 ")] == ["32", "bf16"]


def test_matmul_peak_grows_until_a_product_takes_long_enough():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    flops, n = speed.matmul_peak("32", torch.device("cpu"), max_n=1024, seconds=0.0, repeats=1)
    assert n == 512 and flops > 0  # the first size already took "long enough"
    flops, n = speed.matmul_peak("32", torch.device("cpu"), max_n=1024, seconds=1e9, repeats=1)
    assert n == 1024 and flops > 0  # never long enough: stops at max_n
