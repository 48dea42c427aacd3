"""benchmarks/plot_curves.py on synthetic runs: two seeds whose returns are known, so the table's figures can be
checked exactly, and the PNG must be written."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import plot_curves  # noqa: E402

pytest.importorskip("matplotlib")


def write_run(run_dir: Path, train: list, evals: list):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    for step, value in train:
        writer.add_scalar("charts/episodic_return", value, step)
    for step, value in evals:
        writer.add_scalar("eval/episodic_return", value, step)
    writer.close()


def write_official_and_our_run(tmp_path: Path, records: str) -> tuple:
    """One run of ours (returns 5.0 every 50 policy steps to 400) and an official file of `records`; the path of the
    file and the Plot arguments that draw them (window 200 policy steps = 400 frames at frames_per_step 2)."""
    write_run(tmp_path / "runs" / "env__a__1__100", [(s, 5.0) for s in range(50, 450, 50)], [])
    official = tmp_path / "scores.json"
    official.write_text(records)
    args = dict(group=[f"A={tmp_path}/runs/env__a__*"], out=str(tmp_path / "c.png"), window=200, frames_per_step=2)
    return official, args


def test_windowed_means():
    steps, returns = np.array([50, 150, 190, 390]), np.array([1.0, 2.0, 4.0, -1.0])
    means = plot_curves.windowed(steps, returns, window=100, end=400)
    assert means[:2].tolist() == [1.0, 3.0] and np.isnan(means[2]) and means[3] == -1.0


def test_table_and_png(tmp_path: Path, capsys):
    write_run(tmp_path / "runs" / "a__1", [(s, -1.0) for s in range(10, 410, 10)], [(400, 0.5)])
    write_run(tmp_path / "runs" / "a__2", [(s, 1.0) for s in range(10, 410, 10)], [(400, 1.0)])
    out = tmp_path / "docs" / "curves.png"
    plot_curves.main(
        plot_curves.Plot(group=[f"A={tmp_path}/runs/a__*"], out=str(out), random=-0.6, window=100, last_episodes=10)
    )
    printed = capsys.readouterr().out
    assert "| A | 2 | +0.00 (min -1.00, max +1.00) | +0.75 (min +0.50, max +1.00) |" in printed, printed
    assert out.stat().st_size > 10_000


def test_group_without_runs(tmp_path: Path):
    with pytest.raises(SystemExit, match="matches no run directory"):
        plot_curves.main(plot_curves.Plot(group=[f"A={tmp_path}/nothing*"], out=str(tmp_path / "x.png")))


def test_official_runs_beside_ours_in_frames(tmp_path: Path, capsys):
    """Our runs (x in policy steps, action repeat 2) against an official file (x in frames): the table at 400 frames
    holds each seed's evaluation and training episodes there, and the official min, max and interpolated mean."""
    write_run(tmp_path / "runs" / "env__a__1__100", [(s, 100.0) for s in range(50, 250, 50)], [(100, 10.0), (200, 30.0)])
    write_run(tmp_path / "runs" / "env__a__2__100", [(s, 300.0) for s in range(50, 250, 50)], [(100, 20.0), (200, 50.0)])
    official = tmp_path / "scores.json"
    official.write_text(
        '[{"task": "t", "method": "m", "seed": "0", "xs": [200, 600], "ys": [0, 400]},'
        ' {"task": "t", "method": "m", "seed": "1", "xs": [200, 600], "ys": [100, 300]},'
        ' {"task": "other", "method": "m", "seed": "0", "xs": [200], "ys": [9999]}]'
    )
    out = tmp_path / "curves.png"
    args = dict(group=[f"A={tmp_path}/runs/env__a__*"], out=str(out), window=100, frames_per_step=2, at=[200, 400, 800])
    plot_curves.main(plot_curves.Plot(official=str(official), official_task="t", **args))
    printed = capsys.readouterr().out
    # at 400 frames (policy step 200): evaluations 30 and 50; training episodes ending in (200, 400] frames, i.e. at
    # policy steps 150 and 200; official seeds interpolated to 200 and 200
    assert "| 400 | A seed 1 | 30.0 | 100.0 (2 episodes) | 200, 200; 200 |" in printed, printed
    assert "| 400 | A seed 2 | 50.0 | 300.0 (2 episodes) | 200, 200; 200 |" in printed, printed
    assert "| 200 | A seed 1 | 10.0 | 100.0 (2 episodes) | 0, 100; 50 |" in printed, printed
    assert "| 800 | A seed 1 | - | - | - |" in printed, printed  # past both our runs and the official ones
    assert out.stat().st_size > 10_000
    with pytest.raises(SystemExit, match="no runs of --official-task 'nope'"):
        plot_curves.main(plot_curves.Plot(official=str(official), official_task="nope", **args))


def test_official_training_episodes_are_averaged_in_our_windows(tmp_path: Path, capsys):
    """--official-episodes: the official ys are single training episodes (Atari100k), so the table at X gives the
    mean of each official seed's episodes in the --window before X (here 400 frames), not an interpolation."""
    official, args = write_official_and_our_run(
        tmp_path,
        '[{"task": "t", "method": "m", "seed": "0", "xs": [100, 500, 700, 790, 1000], "ys": [7, 10, 20, 60, 1000]},'
        ' {"task": "t", "method": "m", "seed": "1", "xs": [300, 650, 900], "ys": [1, 3, 3]}]',
    )
    plot_curves.main(plot_curves.Plot(official=str(official), official_task="t", official_episodes=True, at=[800], **args))
    # seed 0: episodes in (400, 800] are 10, 20, 60 -> 30; seed 1: 3 -> min 3, max 30, mean 16.5 (printed rounded)
    assert "| 800 | A seed 1 | - | 5.0 (4 episodes) | 3, 30; 16 |" in capsys.readouterr().out
    plot_curves.main(plot_curves.Plot(official=str(official), official_task="t", at=[800], **args))
    # without it, interpolated between the logged points: seed 0 60 + 10 / 210 * 940 = 105, seed 1 3
    assert "| 800 | A seed 1 | - | 5.0 (4 episodes) | 3, 105; 54 |" in capsys.readouterr().out


def test_official_seeds_without_an_episode_in_the_window(tmp_path: Path, capsys):
    """Where some official seeds ended no episode in the window before X (long Atari episodes), the table gives the
    min, max and mean of the others and says how many they are; where none did, a dash."""
    official, args = write_official_and_our_run(
        tmp_path,
        '[{"task": "t", "method": "m", "seed": "0", "xs": [100, 900], "ys": [7, 9]},'
        ' {"task": "t", "method": "m", "seed": "1", "xs": [100, 500, 900], "ys": [1, 40, 3]}]',
    )
    plot_curves.main(
        plot_curves.Plot(official=str(official), official_task="t", official_episodes=True, at=[600, 1400], **args)
    )
    printed = capsys.readouterr().out
    # (200, 600]: seed 0 has no episode, seed 1 one of 40; (1000, 1400]: neither
    assert "| 600 | A seed 1 | - | 5.0 (4 episodes) | 40, 40; 40 (1 of 2 seeds) |" in printed, printed
    assert "| 1,400 | A seed 1 | - | - | - |" in printed, printed


def test_wall_clock_of_a_resumed_run_leaves_out_the_pause(tmp_path: Path):
    """A resumed run writes a second event file; the hour between the two stretches is not run time."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir = tmp_path / "env__a__1__100"
    for suffix, start, steps in ((".first", 1_000.0, range(10, 60, 10)), (".second", 5_600.0, range(60, 110, 10))):
        writer = SummaryWriter(str(run_dir), filename_suffix=suffix)
        for k, step in enumerate(steps):
            writer.add_scalar("charts/episodic_return", 1.0, step, walltime=start + 100.0 * k)
        writer.close()
    run = plot_curves.read_run(str(run_dir))
    assert run["wall"] == pytest.approx(800.0)  # 400 s each; first to last event would give 5,000 s
    assert run["train"][0].tolist() == list(range(10, 110, 10))
