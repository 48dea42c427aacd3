"""benchmarks/speed.py runs every script's gradient step (eager and compiled), its kernel and FLOP counts, acting and env,
and prints its table (tiny sizes)."""

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


def cells(row: str) -> list:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_speed_table_has_a_row_per_script_and_precision():
    out = speed()
    rows = [line for line in out.stdout.splitlines() if re.match(r"\| (v1|v2|v3|v2-dmc) \|", line)]
    assert [cells(r)[:3] for r in rows] == [[s, p, "eager"] for s in ("v1", "v2", "v3", "v2-dmc") for p in ("32", "bf16")]
    for row in rows:
        params, _, total, world_model, behaviour, _, kernels, compile_s, gflop, _, _, act, env = cells(row)[3:]
        total, gflop, act, env = map(float, (total, gflop, act, env))
        assert total > 0 and gflop > 0 and act > 0 and env > 0, row
        if row.startswith("| v1 "):  # all three gradients before the first optimizer step: not split
            assert world_model == behaviour == "-", row
        else:
            assert abs(total - float(world_model) - float(behaviour)) < 0.02, row
        assert float(params.rstrip("M")) > 0 and int(kernels) > 100 and compile_s == "-", row


def test_speed_compiled_against_eager():
    """--modes eager compiled: a compiled row beside each eager one, with fewer kernels per step and its compile time."""
    out = speed("--scripts", "v3", "--precisions", "32", "--modes", "eager", "compiled", "--no-flops", "--no-env")
    rows = {cells(line)[2]: cells(line) for line in out.stdout.splitlines() if line.startswith("| v3 ")}
    assert list(rows) == ["eager", "compiled"], out.stdout
    eager_kernels, compiled_kernels = int(rows["eager"][9]), int(rows["compiled"][9])
    assert compiled_kernels < eager_kernels / 2, (eager_kernels, compiled_kernels)
    assert rows["eager"][10] == "-" and float(rows["compiled"][10]) > 1, rows


def test_speed_without_flops_and_env():
    """--no-flops --no-env (a machine without the envs, such as a GPU box with only torch): dashes in those columns."""
    out = speed("--scripts", "v3", "--no-flops", "--no-env", "--no-kernels")
    rows = [line for line in out.stdout.splitlines() if line.startswith("| v3 ")]
    assert len(rows) == 2, rows
    for row in rows:
        c = cells(row)
        assert float(c[5]) > 0 and c[9] == "-" and c[11:14] == ["-", "-", "-"] and float(c[14]) > 0 and c[15] == "-", row


def test_speed_where_bf16_is_emulated(monkeypatch, capsys):
    """On a CPU without native bf16 the header says so and the bf16 row runs one step, no warm-up, so it ends in minutes."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    calls, build = {"32": 0, "bf16": 0}, speed.build

    def counting_build(name, precision, mode, bench):
        setup = build(name, precision, mode, bench)
        step = setup["step"]

        def counted(eager: bool = False):
            calls[precision] += 1
            return step(eager)

        return dict(setup, step=counted)

    monkeypatch.setattr(speed, "build", counting_build)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        speed.main(
            speed.Bench(scripts=["v3"], warmup=2, steps=3, act_steps=2, kernels=False, flops=False, env=False, device="cpu",
                        tiny=True)
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "native bf16 no (emulated)" in out.splitlines()[0]
    assert "bf16 is emulated on this machine: its rows are one timed step each, with no warm-up" in out
    assert calls == {"32": 5, "bf16": 1}
    assert [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| v3 ")] == ["32", "bf16"]


def test_speed_a_failing_mode_leaves_the_other_rows(monkeypatch, capsys):
    """A mode that raises (as --compile's CUDA-graph step did on a GPU) gets a row saying where and what; the other modes'
    rows are measured as before, and main returns the number of failed rows (the script's exit status is then 1)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    build = speed.build

    def build_failing_compiled(name, precision, mode, bench):
        setup = build(name, precision, "eager", bench)  # nothing compiled: the "compiled" mode only raises
        if mode != "compiled":
            return setup
        calls = []

        def failing(eager: bool = False):
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("These storage data ptrs | are not allocated in pool\nsecond line")
            return setup["step"](eager)

        return dict(setup, step=failing)

    monkeypatch.setattr(speed, "build", build_failing_compiled)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        failures = speed.main(
            speed.Bench(scripts=["v2"], precisions=["32"], modes=["eager", "compiled"], warmup=1, steps=2, act_steps=2,
                        kernels=False, flops=False, env=False, device="cpu", tiny=True)
        )
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert failures == 1
    what = "failed at gradient step 2: RuntimeError: These storage data ptrs / are not allocated in pool"
    assert f"v2 32 compiled: {what}" in out
    rows = [cells(line) for line in out.splitlines() if line.startswith("| v2 ")]
    assert [r[2] for r in rows] == ["eager", "compiled"]
    assert float(rows[0][5]) > 0 and rows[1][5] == what and len(rows[1]) == len(rows[0]) == 16, rows


def test_loop_steps_is_the_scripts_eager_loop():
    """--scan-chunk 0 swaps each script's scan_steps for loop_steps: the recurrence's last carry and every step's outputs,
    stacked over time, against the recurrence written out (not against scan_steps, which speed.main may have swapped)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    def step(carry, x):
        h = carry["h"] * 0.5 + x[0] * x[1]
        return {"h": h}, {"h": h, "sum": h.sum(-1)}

    a, b = torch.randn(6, 3, 4), torch.randn(6, 3, 4)
    hs, h = [], torch.zeros(3, 4)
    for t in range(6):
        h = h * 0.5 + a[t] * b[t]
        hs.append(h)
    carry, ys = speed.loop_steps(step, {"h": torch.zeros(3, 4)}, (a, b))
    torch.testing.assert_close(carry["h"], hs[-1])
    torch.testing.assert_close(ys["h"], torch.stack(hs))
    torch.testing.assert_close(ys["sum"], torch.stack(hs).sum(-1))


def test_matmul_peak_grows_until_a_product_takes_long_enough():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    flops, n = speed.matmul_peak("32", torch.device("cpu"), max_n=1024, seconds=0.0, repeats=1)
    assert n == 512 and flops > 0  # the first size already took "long enough"
    flops, n = speed.matmul_peak("32", torch.device("cpu"), max_n=1024, seconds=1e9, repeats=1)
    assert n == 1024 and flops > 0  # never long enough: stops at max_n
