"""Learning curves from the TensorBoard event files under runs/: one curve per group of runs (one run per seed), the mean
over seeds as a line and the min-max over seeds as a band, against policy steps. Training returns
(`charts/episodic_return`) are averaged over windows of --window policy steps within each run first, since single
episodes are noisy; evaluations (`eval/episodic_return`) are drawn as points with min-max bars. A dashed line marks a
random policy's mean return (--random). Also prints a markdown table: per group, the seeds, the mean training return
over each run's last --last-episodes episodes, the final evaluation, and the wall-clock of a run (first to last event, each
resumed stretch's event file counted on its own, without the pauses between them).

The official runs' per-seed curves (danijar's score files: a JSON list, gzipped or not, of {task, method, seed, xs,
ys}, x in env frames) are drawn beside ours with --official FILE --official-task TASK, one thin gray line per seed and
their min-max band; --frames-per-step (the action repeat) puts our runs on the same x axis, in frames. --at X ...
prints a second table at those frame counts: each of our seeds' evaluation there and its training episodes of the
--window before it, next to the official seeds' min, max and mean (interpolated between their logged points; over the
seeds that have a point there, the count said when some have none). Where
the official ys are single training episodes (the Atari100k file) rather than evaluations, --official-episodes
averages each official seed over the same windows as ours, in the figure and the table.

    pip install -e ".[plot]"
    python benchmarks/plot_curves.py --group "DreamerV3=runs/*Catch*dreamer_v3*" "DreamerV2=runs/*Catch*dreamer_v2*" \\
        --random -0.59 --title "Catch, 5 seeds" --out docs/img/catch.png
    python benchmarks/plot_curves.py --group "ours=runs/cartpole-balance__*" --frames-per-step 2 --window 5000 \\
        --official benchmarks/official/dmc-vision-dreamerv2-cartpole_balance.json --official-task dmc_cartpole_balance \\
        --at 30000 60000 90000 --out docs/img/dmc_cartpole_balance.png
    python benchmarks/plot_curves.py --group "ours=runs/ALE_KungFuMaster-v5__*" --frames-per-step 4 --window 2500 \\
        --official benchmarks/official/atari100k-dreamerv3-5games.json --official-task atari_kung_fu_master \\
        --official-episodes --at 40000 100000 --out docs/img/atari100k_kung_fu_master.png
"""

import glob
import gzip
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import tyro


@dataclass
class Plot:
    group: List[str] = field(default_factory=list)
    """LABEL=GLOB ...: the run directories matching GLOB (one per seed) make one curve called LABEL"""
    out: str = "curves.png"
    """the PNG to write"""
    title: str = ""
    """the figure's title"""
    random: Optional[float] = None
    """a random policy's mean return, drawn as a dashed line"""
    window: int = 200
    """policy steps per averaging window of the training returns"""
    last_episodes: int = 100
    """training episodes averaged at the end of each run for the table"""
    frames_per_step: int = 1
    """env frames per policy step (the action repeat): above 1 the x axis is in frames, as the official score files"""
    official: Optional[str] = None
    """an official score file (JSON or JSON.gz list of {task, method, seed, xs, ys}, x in frames) to draw beside ours"""
    official_task: str = ""
    """the task of --official to draw (e.g. dmc_cartpole_balance, atari_boxing)"""
    official_label: str = "official"
    """the legend's name for the official runs"""
    official_episodes: bool = False
    """the official ys are single training episodes (the Atari100k file), not evaluations (the DMC file): average each
    official seed over the same --window as ours, in the figure and in the --at table"""
    at: List[int] = field(default_factory=list)
    """frame counts at which to print ours per seed beside the official min-max"""


def read_run(run_dir: str) -> dict:
    """{'train': (steps, returns), 'eval': (steps, returns), 'wall': seconds} of one run directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    ea.Reload()
    tags = ea.Tags()["scalars"]
    series = {}
    for key, tag in (("train", "charts/episodic_return"), ("eval", "eval/episodic_return")):
        events = ea.Scalars(tag) if tag in tags else []
        series[key] = (np.array([e.step for e in events]), np.array([e.value for e in events]))
    # a resumed run writes one event file per stretch: add up each file's span, so the pause between them is not counted
    series["wall"] = 0.0
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        part = EventAccumulator(path, size_guidance={"scalars": 0})
        part.Reload()
        times = [e.wall_time for tag in part.Tags()["scalars"] for e in part.Scalars(tag)]
        series["wall"] += max(times) - min(times) if times else 0.0
    return series


def read_official(path: str, task: str) -> list:
    """[(seed, xs, ys)] of one task in an official score file, x in frames."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        runs = [r for r in json.load(f) if r["task"] == task]
    if not runs:
        raise SystemExit(f"plot_curves.py: error: --official {path} has no runs of --official-task {task!r}")
    return [(str(r["seed"]), np.array(r["xs"], float), np.array(r["ys"], float)) for r in runs]


def seed_of(run_dir: str) -> str:
    """'seed N' from a run directory named {env_id}__{exp_name}__{seed}__{time}, else the directory's name."""
    parts = os.path.basename(os.path.normpath(run_dir)).split("__")
    return f"seed {parts[2]}" if len(parts) == 4 else parts[0]


def windowed(steps: np.ndarray, returns: np.ndarray, window: int, end: int) -> np.ndarray:
    """Mean return of the episodes that ended in each window of policy steps (NaN where none ended)."""
    edges = np.arange(0, end + window, window)
    index = np.digitize(steps, edges[1:], right=True)
    return np.array([returns[index == i].mean() if (index == i).any() else np.nan for i in range(len(edges) - 1)])


def windowed_curve(steps: np.ndarray, returns: np.ndarray, window: int, end: int) -> tuple:
    """(window ends, mean returns) of `windowed`, without the windows where no episode ended."""
    means = windowed(steps, returns, window, end)
    x = np.minimum((np.arange(len(means)) + 1) * window, end)
    return x[~np.isnan(means)], means[~np.isnan(means)]


def main(args: Plot):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not args.group:
        raise SystemExit("plot_curves.py: error: pass at least one --group LABEL=GLOB")
    fig, ax = plt.subplots(figsize=(7.0, 5.0), dpi=110)
    window = args.window * args.frames_per_step  # in frames
    rows = ["| runs | seeds | last training episodes | final evaluation | wall-clock per run |", "|---|---|---|---|---|"]
    groups, official = [], read_official(args.official, args.official_task) if args.official else []
    for i, spec in enumerate(args.group):
        label, _, pattern = spec.partition("=")
        run_dirs = sorted(d for d in glob.glob(pattern) if os.path.isdir(d))
        if not label or not run_dirs:
            raise SystemExit(f"plot_curves.py: error: --group {spec!r} matches no run directory (use LABEL=GLOB)")
        runs = [read_run(d) for d in run_dirs]
        for r in runs:  # x in frames
            r["train"], r["eval"] = [(steps * args.frames_per_step, v) for steps, v in (r["train"], r["eval"])]
        groups.append((label, run_dirs, runs))
        color = f"C{i}"
        end = max(int(r["train"][0].max()) for r in runs if len(r["train"][0]))
        curves = np.array([windowed(*r["train"], window, end) for r in runs])
        x = np.minimum((np.arange(curves.shape[1]) + 1) * window, end)  # each window at its end
        with np.errstate(all="ignore"):  # windows where no seed ended an episode stay empty
            ax.plot(x, np.nanmean(curves, 0), color=color, label=f"{label} (training)")
            ax.fill_between(x, np.nanmin(curves, 0), np.nanmax(curves, 0), color=color, alpha=0.2, linewidth=0)
        finals = [r["eval"][1][-1] for r in runs if len(r["eval"][1])]
        eval_steps = sorted({int(s) for r in runs for s in r["eval"][0]})
        if eval_steps:
            points = [[v for r in runs for s, v in zip(*r["eval"]) if s == step] for step in eval_steps]
            means = np.array([np.mean(p) for p in points])
            spread = np.array([[m - min(p) for m, p in zip(means, points)], [max(p) - m for m, p in zip(means, points)]])
            ax.errorbar(eval_steps, means, yerr=spread, fmt="o", color=color, capsize=3, label=f"{label} (evaluation)")
        last = [r["train"][1][-args.last_episodes :].mean() for r in runs]
        rows.append(
            f"| {label} | {len(runs)} | {np.mean(last):+.2f} (min {min(last):+.2f}, max {max(last):+.2f}) | "
            + (f"{np.mean(finals):+.2f} (min {min(finals):+.2f}, max {max(finals):+.2f})" if finals else "none")
            + f" | {np.mean([r['wall'] for r in runs]):.0f} s |"
        )
    if official:
        end = max(int(r["train"][0].max()) for _, _, runs in groups for r in runs if len(r["train"][0]))
        drawn = official
        if args.official_episodes:  # each official seed's episodes averaged in our windows, drawn at the windows' ends
            drawn = [(seed, *windowed_curve(xs, ys, window, end)) for seed, xs, ys in official]
        grid = np.linspace(0, end, 200)
        curves = np.array([np.interp(grid, xs, ys, left=np.nan, right=np.nan) for _, xs, ys in drawn])
        for k, (_, xs, ys) in enumerate(drawn):
            keep = xs <= end * 1.1  # the official curve a little past our last point
            ax.plot(
                xs[keep],
                ys[keep],
                ".-",
                color="gray",
                linewidth=0.8,
                markersize=3,
                alpha=0.7,
                label=None if k else args.official_label,
            )
        with warnings.catch_warnings():  # before the official runs' first logged point the band is empty
            warnings.simplefilter("ignore", RuntimeWarning)
            ax.fill_between(grid, np.nanmin(curves, 0), np.nanmax(curves, 0), color="gray", alpha=0.15, linewidth=0)
    if args.at:
        rows += ["", "| frames | run | evaluation | training episodes before | " + args.official_label + " (min, max; mean) |"]
        rows.append("|---|---|---|---|---|")
        for x in args.at:
            if args.official_episodes:  # the mean of each official seed's episodes in the window before x
                episodes = [ys[(xs > x - window) & (xs <= x)] for _, xs, ys in official]
                values = [float(e.mean()) if len(e) else np.nan for e in episodes]
            else:
                values = [float(np.interp(x, xs, ys, left=np.nan, right=np.nan)) for _, xs, ys in official]
            have = [v for v in values if not np.isnan(v)]  # seeds with an episode in the window (or a logged point around x)
            ref = f"{min(have):.0f}, {max(have):.0f}; {np.mean(have):.0f}" if have else "-"
            if have and len(have) < len(values):
                ref += f" ({len(have)} of {len(values)} seeds)"
            for label, run_dirs, runs in groups:
                for run_dir, r in zip(run_dirs, runs):
                    ev = [v for step, v in zip(*r["eval"]) if step == x]
                    near = r["train"][1][(r["train"][0] > x - window) & (r["train"][0] <= x)]
                    rows.append(
                        f"| {x:,} | {label} {seed_of(run_dir)} | {f'{ev[-1]:.1f}' if ev else '-'} | "
                        + (f"{near.mean():.1f} ({len(near)} episodes)" if len(near) else "-")
                        + f" | {ref} |"
                    )
    if args.random is not None:
        ax.axhline(args.random, color="gray", linestyle="--", label=f"random policy ({args.random:+.2f})")
    ax.set_xlabel("frames" if args.frames_per_step > 1 or official else "policy steps")
    ax.set_ylabel("episodic return")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out)
    print("\n".join(rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(tyro.cli(Plot))
