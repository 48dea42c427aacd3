"""Learning curves from the TensorBoard event files under runs/: one curve per group of runs (one run per seed), the mean
over seeds as a line and the min-max over seeds as a band, against policy steps. Training returns
(`charts/episodic_return`) are averaged over windows of --window policy steps within each run first, since single
episodes are noisy; evaluations (`eval/episodic_return`) are drawn as points with min-max bars. A dashed line marks a
random policy's mean return (--random). Also prints a markdown table: per group, the seeds, the mean training return
over each run's last --last-episodes episodes, the final evaluation, and the wall-clock of a run (first to last event).

    pip install -e ".[plot]"
    python benchmarks/plot_curves.py --group "DreamerV3=runs/*Catch*dreamer_v3*" "DreamerV2=runs/*Catch*dreamer_v2*" \\
        --random -0.59 --title "Catch, 5 seeds" --out docs/img/catch.png
"""

import glob
import os
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
    times = [e.wall_time for tag in tags for e in ea.Scalars(tag)]
    series["wall"] = max(times) - min(times) if times else 0.0
    return series


def windowed(steps: np.ndarray, returns: np.ndarray, window: int, end: int) -> np.ndarray:
    """Mean return of the episodes that ended in each window of policy steps (NaN where none ended)."""
    edges = np.arange(0, end + window, window)
    index = np.digitize(steps, edges[1:], right=True)
    return np.array([returns[index == i].mean() if (index == i).any() else np.nan for i in range(len(edges) - 1)])


def main(args: Plot):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not args.group:
        raise SystemExit("plot_curves.py: error: pass at least one --group LABEL=GLOB")
    fig, ax = plt.subplots(figsize=(7.0, 5.0), dpi=110)
    rows = ["| runs | seeds | last training episodes | final evaluation | wall-clock per run |", "|---|---|---|---|---|"]
    for i, spec in enumerate(args.group):
        label, _, pattern = spec.partition("=")
        run_dirs = sorted(d for d in glob.glob(pattern) if os.path.isdir(d))
        if not label or not run_dirs:
            raise SystemExit(f"plot_curves.py: error: --group {spec!r} matches no run directory (use LABEL=GLOB)")
        runs = [read_run(d) for d in run_dirs]
        color = f"C{i}"
        end = max(int(r["train"][0].max()) for r in runs if len(r["train"][0]))
        curves = np.array([windowed(*r["train"], args.window, end) for r in runs])
        x = np.minimum((np.arange(curves.shape[1]) + 1) * args.window, end)  # each window at its end
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
    if args.random is not None:
        ax.axhline(args.random, color="gray", linestyle="--", label=f"random policy ({args.random:+.2f})")
    ax.set_xlabel("policy steps")
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
