"""benchmarks/parity/compare_metrics.py puts the official runs' metrics beside ours, on the committed parity logs."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARITY = ROOT / "benchmarks" / "curves" / "parity"


def test_table_has_every_metric_with_both_sides_in_the_bins_the_runs_reached():
    official = sorted(PARITY.glob("official_cartpole_balance_reduced_*"))
    ours = sorted(PARITY.glob("cartpole-balance__parity_fp32__*"))
    assert len(official) == 2 and len(ours) == 2, (official, ours)
    out = subprocess.run(
        [sys.executable, "benchmarks/parity/compare_metrics.py", "--official", *map(str, official), "--ours", *map(str, ours),
         "--bins", "0", "10000", "20000", "1000000000"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and not line.startswith("| metric")]
    assert len(rows) == 10, out.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        official_cell, ours_cell = cells[2].split(" / ")  # 10k-20k frames: every run has logged there
        values = [float(v) for v in official_cell.split(", ") + ours_cell.split(", ")]
        assert len(values) == 4 and all(v == v for v in values), row  # no NaN
    image = next(r for r in rows if r.startswith("| image_loss"))
    image_values = image.split("|")[3].replace("/", ",").split(",")
    assert "(less the constant)" in image and all(abs(float(v)) < 100 for v in image_values)
    evals = [line for line in out.stdout.splitlines() if line.startswith("- ")]
    assert len(evals) == 4 and all(line.count("k: ") >= 3 for line in evals), out.stdout  # every run evaluated 3+ times
    official_frames = [float(x.split("k: ")[0]) for x in evals[0].split(": ", 1)[1].split(", ")]
    assert official_frames == sorted(official_frames) and official_frames[0] == 2  # the prefill policy's, at 2k frames
