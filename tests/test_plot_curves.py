"""benchmarks/plot_curves.py on synthetic runs: two seeds whose returns are known, so the table's figures can be
checked exactly, and the PNG must be written."""

import subprocess
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


def test_long_legend_labels_are_not_cut_off(tmp_path: Path):
    """The legend sits below the axes, two columns wide: labels wider than the figure widen the PNG, not cut."""
    write_run(tmp_path / "runs" / "a__1", [(s, 1.0) for s in range(10, 410, 10)], [(400, 1.0)])
    widths = []
    for label in ("A", "a group label long enough to run past the edge of a 7-inch figure " * 2):
        out = tmp_path / f"curves{len(widths)}.png"
        plot_curves.main(plot_curves.Plot(group=[f"{label}={tmp_path}/runs/a__*"], out=str(out), window=100))
        widths.append(int.from_bytes(out.read_bytes()[16:20], "big"))  # the PNG header's IHDR width
    assert widths[1] > 1.5 * widths[0], widths


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


# Lines as the official DreamerV2's train.py writes them to LOGDIR/metrics.jsonl (`step` in env frames; the first lines
# of a real run, values shortened): two prefill training episodes, the evaluations of the random policy and of the
# pretrain-only agent at the prefill's end, then averaged training metrics every log_every.
OFFICIAL_LINES = [
    {"step": 1000, "train_return": 380.9, "train_length": 500.0, "train_total_steps": 500.0},
    {"step": 2000, "train_return": 297.0, "train_length": 500.0, "train_total_steps": 1000.0},
    {"step": 2000, "eval_return": 341.4, "eval_length": 500.0},
    {"step": 2000, "eval_return": 240.5, "eval_length": 500.0},
    {"step": 2002, "kl_loss": 1.0, "image_loss": 11307.1, "reward_loss": 1.06, "model_kl": 0.69, "actor_ent": 0.66},
]


def write_official_run(run_dir: Path, seed: int, lines: list, partial: str = "", prefill: int = 1000):
    """A logdir of the official code: config.yaml (the seed) and metrics.jsonl, with an unfinished last line if given."""
    import json

    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"action_repeat: 2\nprefill: {prefill}\nseed: {seed}\nsteps: 50000.0\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + partial)


def official_runs(tmp_path: Path) -> str:
    """Two seeds of the official code to 4,000 frames; returns their GLOB."""
    later = [
        {"step": 3000, "train_return": 500.0},
        {"step": 3002, "kl_loss": 3.0, "image_loss": 9000.0},
        {"step": 4000, "train_return": 700.0},
        {"step": 4000, "kl_loss": 5.0, "eval_return": 800.0},
    ]
    write_official_run(tmp_path / "official" / "run_1", 1, OFFICIAL_LINES + later, partial='{"step": 4002, "kl_lo')
    write_official_run(tmp_path / "official" / "run_2", 2, OFFICIAL_LINES[:4] + [{"step": 3000, "train_return": 100.0}])
    return f"{tmp_path}/official/run_*"


def test_read_official_run(tmp_path: Path):
    """metrics.jsonl's returns and metrics by key, x as logged (frames); the unfinished line the run is writing is
    skipped; the seed comes from config.yaml."""
    official_runs(tmp_path)
    run = plot_curves.read_official_run(str(tmp_path / "official" / "run_1"))
    assert run["seed"] == "seed 1"
    assert run["train"][0].tolist() == [1000, 2000, 3000, 4000] and run["train"][1].tolist() == [380.9, 297.0, 500.0, 700.0]
    # the random prefill policy's episode (the first evaluation) is left out
    assert run["eval"][0].tolist() == [2000, 4000] and run["eval"][1].tolist() == [240.5, 800.0]
    assert run["metrics"]["kl_loss"][0].tolist() == [2002, 3002, 4000]
    assert run["metrics"]["kl_loss"][1].tolist() == [1.0, 3.0, 5.0]
    assert "train_return" not in run["metrics"] and "eval_return" not in run["metrics"]


def test_read_official_run_averages_the_episodes_of_one_evaluation(tmp_path: Path):
    """eval_eps 3: the three episodes logged at one step are one evaluation, their mean (as ours log it); the random
    prefill policy's episode before them is left out, and kept where the run had no prefill (then there is none)."""
    lines = OFFICIAL_LINES[:3] + [{"step": 2000, "eval_return": r} for r in (100.0, 200.0, 600.0)]
    lines += [{"step": 12000, "eval_return": r} for r in (400.0, 500.0, 900.0)]
    write_official_run(tmp_path / "a", 1, lines)
    run = plot_curves.read_official_run(str(tmp_path / "a"))
    assert run["eval"][0].tolist() == [2000, 12000] and run["eval"][1].tolist() == [300.0, 600.0]
    write_official_run(tmp_path / "b", 1, lines[3:], prefill=0)
    run = plot_curves.read_official_run(str(tmp_path / "b"))
    assert run["eval"][0].tolist() == [2000, 12000] and run["eval"][1].tolist() == [300.0, 600.0]


def test_official_runs_beside_ours_per_seed_with_table_rows(tmp_path: Path, capsys):
    """--official-run: each seed of the official code gets --at rows, as ours do: its last evaluation at or before X
    (the frame said when it is not X) and its training episodes in the window before X; a run that has not reached X
    gets dashes.
    The summary table has a row for them too."""
    pattern = official_runs(tmp_path)
    write_run(tmp_path / "runs" / "env__a__1__100", [(s, 5.0) for s in range(500, 2500, 500)], [(1500, 9.0)])
    out = tmp_path / "c.png"
    args = dict(group=[f"A={tmp_path}/runs/env__a__*"], out=str(out), window=1000, frames_per_step=2, per_seed=True)
    plot_curves.main(plot_curves.Plot(official_run=[f"B={pattern}"], at=[3000, 4000], **args))
    printed = capsys.readouterr().out
    # window 2,000 frames: (1000, 3000] holds seed 1's 297 and 500, seed 2's 297 and 100; its last evaluation before
    # 3,000 is the pretrain-only one at 2,000 (the random policy's came first)
    assert "| 3,000 | B seed 1 | 240.5 (at 2,000) | 398.5 (2 episodes) | - |" in printed, printed
    assert "| 3,000 | B seed 2 | 240.5 (at 2,000) | 198.5 (2 episodes) | - |" in printed, printed
    assert "| 4,000 | B seed 1 | 800.0 | 600.0 (2 episodes) | - |" in printed, printed
    assert "| 4,000 | B seed 2 | - | - | - |" in printed, printed  # seed 2 stopped at 3,000 frames
    assert "| 3,000 | A seed 1 | 9.0 | 5.0 (2 episodes) | - |" in printed, printed  # ours: evaluation at policy step 1500
    assert "| 4,000 | A seed 1 | 9.0 (at 3,000) | 5.0 (2 episodes) | - |" in printed, printed  # ours, the same rule
    # last 100 training episodes: seed 1 (380.9 + 297 + 500 + 700) / 4 = 469.475, seed 2 259.3; final evaluations 800, 240.5
    assert "| B | 2 | +364.39 (min +259.30, max +469.48) | +520.25 (min +240.50, max +800.00) | - |" in printed, printed
    assert out.stat().st_size > 10_000
    plot_curves.main(plot_curves.Plot(official_run=[f"B={pattern}"], out=str(out)))  # the official runs alone
    with pytest.raises(SystemExit, match="matches no run directory with a metrics.jsonl"):
        plot_curves.main(plot_curves.Plot(official_run=[f"B={tmp_path}/runs/*"], out=str(out)))


def test_unbin_moves_each_bin_to_its_evaluations():
    """dreamerv2's DMC file: 30k-frame bins labelled by their right edge, evaluations at 2k (random policy, then the
    pretrain-only agent), 22k, 42k, ...: the 30k bin (2k, 2k, 22k) is left out, 60k is the evaluation at 42k, 90k the
    mean of 62k and 82k, 120k the one at 102k."""
    xs, ys = np.array([30000.0, 60000, 90000, 120000]), np.array([300.0, 500, 800, 950])
    moved_xs, moved_ys = plot_curves.unbin(xs, ys, 30000, 2000, 20000)
    assert moved_xs.tolist() == [42000, 72000, 102000] and moved_ys.tolist() == [500, 800, 950]
    with pytest.raises(SystemExit, match="points off its bin edges"):
        plot_curves.unbin(np.array([30000.0, 45000]), ys[:2], 30000, 2000, 20000)


def test_official_binned_in_the_table(tmp_path: Path, capsys):
    """--official-binned: the --at table interpolates between the moved points, so at 102,000 frames it gives the
    120k bin's values (the evaluation at 102k), and at 30,000 (before the first kept point) none."""
    official, args = write_official_and_our_run(
        tmp_path,
        '[{"task": "t", "method": "m", "seed": "0", "xs": [30000, 60000, 90000, 120000], "ys": [300, 500, 800, 950]},'
        ' {"task": "t", "method": "m", "seed": "1", "xs": [30000, 60000, 90000, 120000], "ys": [200, 400, 700, 910]}]',
    )
    plot_curves.main(
        plot_curves.Plot(official=str(official), official_task="t", official_binned=30000, at=[30000, 102000], **args)
    )
    printed = capsys.readouterr().out
    assert "| 102,000 | A seed 1 | - | - | 910, 950; 930 |" in printed, printed
    assert "| 30,000 | A seed 1 | - | - | - |" in printed, printed
    plot_curves.main(plot_curves.Plot(official=str(official), official_task="t", at=[102000], **args))
    # as published, interpolated between the 90k and 120k points: 800 + 0.4 x 150 and 700 + 0.4 x 210
    assert "| 102,000 | A seed 1 | - | - | 784, 860; 822 |" in capsys.readouterr().out


def test_title_hlines_and_ylim(tmp_path: Path):
    """Every figure has a title (the labels when --title is not given); --hline draws labelled lines; --ylim sets the
    range."""
    import matplotlib.pyplot as plt

    write_run(tmp_path / "runs" / "a__1", [(s, 1.0) for s in range(10, 410, 10)], [])
    args = dict(group=[f"A={tmp_path}/runs/a__*"], out=str(tmp_path / "c.png"), window=100)
    plt.close("all")
    plot_curves.main(plot_curves.Plot(hline=["zero action=749", "random actions=315.5"], ylim=(0.0, 1000.0), **args))
    ax = plt.gcf().axes[0]
    assert ax.get_title() == "episodic return: A"
    assert ax.get_ylim() == (0.0, 1000.0)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "zero action (749)" in legend and "random actions (315.5)" in legend
    assert sorted(line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == ":") == [315.5, 749]
    plot_curves.main(plot_curves.Plot(title="Catch", **args))
    assert plt.gcf().axes[0].get_title() == "Catch"
    with pytest.raises(SystemExit, match="--hline 'zero': use LABEL=VALUE"):
        plot_curves.main(plot_curves.Plot(hline=["zero"], **args))
    with pytest.raises(SystemExit, match="'x' is not a number"):
        plot_curves.main(plot_curves.Plot(hline=["zero=x"], **args))


def test_metric_figure_and_table(tmp_path: Path, capsys):
    """--metric OURS=THEIRS: a second PNG, and at each --at the mean of each seed's logged values in the window before
    it, ours (policy steps x frames per step) beside theirs (frames); a key nobody logged stops with the keys there."""
    from torch.utils.tensorboard import SummaryWriter

    pattern = official_runs(tmp_path)
    writer = SummaryWriter(str(tmp_path / "runs" / "env__a__1__100"))
    for step in range(250, 2250, 250):
        writer.add_scalar("charts/episodic_return", 1.0, step)
        writer.add_scalar("losses/kl", step / 250, step)  # 1, 2, ... 8 at policy steps 250 ... 2000
    writer.close()
    out = tmp_path / "c.png"
    args = dict(group=[f"A={tmp_path}/runs/env__a__*"], official_run=[f"B={pattern}"], out=str(out), window=1000)
    plot_curves.main(plot_curves.Plot(metric=["losses/kl=kl_loss"], frames_per_step=2, at=[4000], **args))
    printed = capsys.readouterr().out
    # (2000, 4000] frames: ours at policy steps 1250 ... 2000 -> 5, 6, 7, 8; seed 1's kl_loss at 2002, 3002, 4000 -> 1,
    # 3, 5
    assert "| 4,000 | losses/kl / kl_loss | A seed 1 | 6.5 (4 logged) |" in printed, printed
    assert "| 4,000 | losses/kl / kl_loss | B seed 1 | 3 (3 logged) |" in printed, printed
    assert "| 4,000 | losses/kl / kl_loss | B seed 2 | - |" in printed, printed
    assert (tmp_path / "c_metrics.png").stat().st_size > 10_000
    with pytest.raises(
        SystemExit, match="no --official-run run logged 'kl'; they logged actor_ent, eval_length, image_loss, kl_loss"
    ):
        plot_curves.main(plot_curves.Plot(metric=["losses/kl=kl"], **args))
    with pytest.raises(SystemExit, match="no --group run logged 'losses/klx'; they logged charts/episodic_return, losses/kl"):
        plot_curves.main(plot_curves.Plot(metric=["losses/klx=kl_loss"], **args))


def test_a_second_group_flag_is_refused():
    """tyro keeps only the last --group's runs: the command line must say so rather than draw half the groups."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "plot_curves.py"
    result = subprocess.run(
        [sys.executable, str(script), "--group", "a=x", "--group", "b=y"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and "--group takes all its groups at once" in result.stderr
