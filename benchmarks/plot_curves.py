"""Learning curves from the TensorBoard event files under runs/: one curve per group of runs (one run per seed), the mean
over seeds as a line and the min-max over seeds as a band, against policy steps. Training returns
(`charts/episodic_return`) are averaged over windows of --window policy steps within each run first, since single
episodes are noisy; evaluations (`eval/episodic_return`) are drawn as points with min-max bars (--per-seed: each seed's
own line and points instead). A dashed line marks a random policy's mean return (--random), dotted lines any other
reference return (--hline "zero action=749"). Also prints a markdown table: per group, the seeds, the mean training
return over each run's last --last-episodes episodes, the final evaluation, and the wall-clock of a run (first to last
event, each resumed stretch's event file counted on its own, without the pauses between them). Every figure has a title
(--title, else one made of the labels); --ylim LOW HIGH fixes the y range, so that runs far below the official ones can
be read.

The official runs' per-seed curves (danijar's score files: a JSON list, gzipped or not, of {task, method, seed, xs,
ys}, x in env frames) are drawn beside ours with --official FILE --official-task TASK, one thin gray line per seed and
their min-max band; --frames-per-step (the action repeat) puts our runs on the same x axis, in frames. --at X ...
prints a second table at those frame counts: each of our seeds' evaluation there and its training episodes of the
--window before it, next to the official seeds' min, max and mean (interpolated between their logged points; over the
seeds that have a point there, the count said when some have none). Where
the official ys are single training episodes (the Atari100k file) rather than evaluations, --official-episodes
averages each official seed over the same windows as ours, in the figure and the table.

Binned score files: danijar/dreamerv2's common/plot.py averages each run's evaluations in bins of equal width and labels
each bin by its right edge (`bin_scores`: a bin (a, b] is drawn at b), and the published DMC file
(`scores/dmc-vision-dreamerv2.json`) has 30k-frame bins. Its runs evaluated one episode after the prefill with the
random policy, one with the agent trained only by the 100 pretraining steps (both at 2,000 frames: prefill 1,000 policy
steps x action repeat 2), then every 20,000 frames (eval_every 1e4 policy steps): 22k, 42k, 62k, ... So its "30k"
point averages a random-policy episode, a pretrain-only episode and the evaluation at 22k; "60k" is the evaluation at
42k, "90k" the mean of those at 62k and 82k, "120k" the one at 102k. --official-binned 30000 draws (and interpolates
for --at) each bin's value at the mean frame of the evaluations it averages, and leaves out the bins that hold the
first evaluation (the random and untrained ones); --official-eval-frames FIRST EVERY gives that schedule in frames
(default 2000 20000, DreamerV2's dmc_vision config).

The official code's own runs (benchmarks/parity/dreamerv2_official.sh: its logdir's metrics.jsonl, one JSON object per
line, `step` in env frames): --official-run "LABEL=GLOB" (repeatable), GLOB matching one logdir per seed, draws each
seed on its own: its training episodes (`train_return`) averaged in the same --window as ours, and its evaluations
(`eval_return`) as points. --at adds a row per official run and seed: its last evaluation at or before X (with the
frame it was made at when that is not X) and its training episodes of the --window before X. Its first evaluations,
at the prefill's end (2,000 frames at action repeat 2), are the random policy's and the pretrain-only agent's.

Training metrics, curve by curve: --metric OURS_TAG=THEIRS_KEY (repeatable) draws a second figure (--metric-out,
default the --out name with `_metrics` added), one panel per pair: our runs' TensorBoard scalar OURS_TAG and the
--official-run runs' metrics.jsonl key THEIRS_KEY, each seed's values averaged in the --window (both log the mean over
the gradient steps since their last log, ours every --log-every policy steps, theirs every log_every; runs of our code
before commit 053d216 logged the last gradient step's values), and with --at a table of those window means. The
pairs of dreamer_v2_dmc.py and danijar/dreamerv2:

    losses/model=model_loss          losses/image=image_loss        losses/reward=reward_loss
    losses/kl=kl_loss                (the balanced KL loss, each term clipped below at the free nats)
    losses/kl_prior=model_kl         (ours clipped below at the free nats, theirs not)
    losses/prior_entropy=prior_ent   losses/post_entropy=post_ent   losses/actor_entropy=actor_ent
    losses/actor=actor_loss          losses/critic=critic_loss      losses/value=critic
    losses/target_value=critic_slow  losses/imagined_return=critic_target
    losses/model_grad_norm=model_grad_norm  losses/actor_grad_norm=actor_grad_norm  losses/critic_grad_norm=critic_grad_norm

    pip install -e ".[plot]"
    python benchmarks/plot_curves.py --group "DreamerV3=runs/*Catch*dreamer_v3*" "DreamerV2=runs/*Catch*dreamer_v2*" \\
        --random -0.59 --title "Catch, 5 seeds" --out docs/img/catch.png
    python benchmarks/plot_curves.py --group "ours=runs/cartpole-balance__*" --frames-per-step 2 --window 5000 \\
        --official benchmarks/official/dmc-vision-dreamerv2-cartpole_balance.json --official-task dmc_cartpole_balance \\
        --official-binned 30000 --at 42000 62000 82000 --out cartpole_balance.png
    python benchmarks/plot_curves.py --group "ours=benchmarks/curves/parity/cartpole-balance__parity_fp32__*" --per-seed \\
        --official-run "official DreamerV2=benchmarks/curves/parity/official_cartpole_balance_reduced_*" \\
        --frames-per-step 2 --window 2500 --hline "zero action=749" --hline "random actions=315" \\
        --metric losses/kl=kl_loss --metric losses/image=image_loss --at 20000 40000 --title "cartpole-balance, parity"
    python benchmarks/plot_curves.py --group "ours=runs/ALE_KungFuMaster-v5__*" --frames-per-step 4 --window 2500 \\
        --official benchmarks/official/atari100k-dreamerv3-5games.json --official-task atari_kung_fu_master \\
        --official-episodes --at 40000 100000 --out docs/img/atari100k_kung_fu_master.png
"""

import glob
import gzip
import json
import os
import re
import textwrap
import warnings
from dataclasses import dataclass, field
from typing import Annotated, List, Optional, Tuple

import numpy as np
import tyro

Repeatable = tyro.conf.UseAppendAction  # --flag A --flag B: each occurrence adds one value


@dataclass
class Plot:
    group: List[str] = field(default_factory=list)
    """LABEL=GLOB ...: the run directories matching GLOB (one per seed) make one curve called LABEL"""
    out: str = "curves.png"
    """the PNG to write"""
    title: str = ""
    """the figure's title (default: the labels of the runs drawn)"""
    random: Optional[float] = None
    """a random policy's mean return, drawn as a dashed line"""
    hline: Annotated[List[str], Repeatable] = field(default_factory=list)
    """LABEL=VALUE: a reference return drawn as a dotted line (e.g. "zero action=749")"""
    ylim: Optional[Tuple[float, float]] = None
    """LOW HIGH: the y range of the returns figure (what lies outside is cut off)"""
    per_seed: bool = False
    """draw each of our seeds on its own (a line and evaluation points per seed) instead of the mean and min-max"""
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
    official_binned: int = 0
    """the --official file's bin width in frames (30000 for dreamerv2's DMC file, whose points average each 30k-frame
    bin of evaluations and sit at its right edge): each point is moved to the mean frame of the evaluations it averages,
    and the bins holding the first evaluation (the prefill's random policy and the pretrain-only agent) are left out"""
    official_eval_frames: Tuple[int, int] = (2000, 20000)
    """FIRST EVERY: the frames of the binned runs' evaluations, the first (after the prefill) and the gap between them
    (DreamerV2's dmc_vision: prefill 1,000 and eval_every 1e4 policy steps at action repeat 2)"""
    official_run: Annotated[List[str], Repeatable] = field(default_factory=list)
    """LABEL=GLOB: the official code's logdirs matching GLOB (one per seed, each with its metrics.jsonl,
    x already in frames), drawn per seed: training episodes averaged in our windows, evaluations as points"""
    metric: Annotated[List[str], Repeatable] = field(default_factory=list)
    """OURS_TAG=THEIRS_KEY: a second figure with one panel per pair, our TensorBoard scalar (e.g. losses/kl)
    beside the --official-run key (e.g. kl_loss), per seed, averaged in the --window (the pairs: see the top of this file)"""
    metric_out: str = ""
    """the PNG of the --metric figure (default: --out with _metrics before .png)"""
    at: List[int] = field(default_factory=list)
    """frame counts at which to print ours per seed beside the official min-max"""


def read_run(run_dir: str, tags: tuple = ()) -> dict:
    """{'train': (steps, returns), 'eval': (steps, returns), 'wall': seconds, 'metrics': {tag: (steps, values)}} of one
    run directory; `tags` are the other scalars to read (a tag the run lacks gives empty arrays)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    ea.Reload()
    present = ea.Tags()["scalars"]

    def scalars(tag: str) -> tuple:
        events = ea.Scalars(tag) if tag in present else []
        return np.array([e.step for e in events]), np.array([e.value for e in events])

    series = {"train": scalars("charts/episodic_return"), "eval": scalars("eval/episodic_return")}
    series["metrics"], series["tags"] = {tag: scalars(tag) for tag in tags}, present
    # a resumed run writes one event file per stretch: add up each file's span, so the pause between them is not counted
    series["wall"] = 0.0
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        part = EventAccumulator(path, size_guidance={"scalars": 0})
        part.Reload()
        times = [e.wall_time for tag in part.Tags()["scalars"] for e in part.Scalars(tag)]
        series["wall"] += max(times) - min(times) if times else 0.0
    return series


def read_official_run(run_dir: str) -> dict:
    """{'train': (frames, returns), 'eval': (frames, returns), 'metrics': {key: (frames, values)}, 'seed': 'seed N'} of
    one logdir of the official code, from its metrics.jsonl (`step` is in env frames; a line may hold any subset of the
    keys). A line that does not parse (the last one, while the run is writing it) is skipped.
    Evaluations as ours log them: its train.py plays one episode of the random prefill policy through the evaluation
    driver before it pretrains (logged as the run's first eval_return when config.yaml has a prefill), which is left
    out, and the episodes of one evaluation (`eval_eps` of them, logged at the same step) are averaged."""
    columns = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    columns.setdefault(key, []).append((record["step"], value))
    series = {k: tuple(np.array(c, float).T) for k, c in columns.items()}
    empty = (np.zeros(0), np.zeros(0))
    run = {"train": series.pop("train_return", empty), "eval": series.pop("eval_return", empty), "metrics": series}
    config_path = os.path.join(run_dir, "config.yaml")  # its settings and seed (danijar's train.py writes it there)
    config = open(config_path).read() if os.path.isfile(config_path) else ""
    match = re.search(r"^seed: (\S+)$", config, re.M)
    run["seed"] = f"seed {match[1]}" if match else os.path.basename(os.path.normpath(run_dir))
    prefill = re.search(r"^prefill: (\S+)$", config, re.M)
    steps, returns = run["eval"]
    if prefill and float(prefill[1]) > 0 and len(steps):
        steps, returns = steps[1:], returns[1:]  # the random policy's episode
    at = np.unique(steps)
    run["eval"] = (at, np.array([returns[steps == x].mean() for x in at]))
    return run


def read_official(path: str, task: str) -> list:
    """[(seed, xs, ys)] of one task in an official score file, x in frames."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        runs = [r for r in json.load(f) if r["task"] == task]
    if not runs:
        raise SystemExit(f"plot_curves.py: error: --official {path} has no runs of --official-task {task!r}")
    return [(str(r["seed"]), np.array(r["xs"], float), np.array(r["ys"], float)) for r in runs]


def unbin(xs: np.ndarray, ys: np.ndarray, width: int, first: int, every: int) -> tuple:
    """The points of a binned score file (each the mean of the evaluations in (x - width, x], drawn at x) moved to the
    mean frame of the evaluations they average, which happen at `first`, `first + every`, ...; the bins that hold the
    first evaluation (the prefill's random policy and the untrained agent) are left out."""
    if np.any(xs % width):
        raise SystemExit(f"plot_curves.py: error: --official-binned {width}: the file has points off its bin edges")
    evals = first + every * np.arange(int(xs.max()) // every + 1)
    kept = []
    for x, y in zip(xs, ys):
        inside = evals[(evals > x - width) & (evals <= x)]
        if len(inside) and inside[0] != first:
            kept.append((inside.mean(), y))
    return tuple(np.array(kept, float).reshape(-1, 2).T)


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


def label_and_value(spec: str, flag: str, what: str) -> tuple:
    label, sep, value = spec.partition("=")
    if not (label and sep and value):
        raise SystemExit(f"plot_curves.py: error: {flag} {spec!r}: use {what}")
    return label, value


def run_dirs_of(spec: str, flag: str, needs: str = "") -> tuple:
    """(LABEL, the directories matching GLOB) of a LABEL=GLOB, those holding `needs` if given."""
    label, pattern = label_and_value(spec, flag, "LABEL=GLOB")
    run_dirs = sorted(d for d in glob.glob(pattern) if os.path.isdir(d) and (not needs or os.path.isfile(f"{d}/{needs}")))
    if not run_dirs:
        raise SystemExit(
            f"plot_curves.py: error: {flag} {spec!r} matches no run directory" + (f" with a {needs}" if needs else "")
        )
    return label, run_dirs


SEED_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v")]


def draw_per_seed(ax, label: str, seeds: list, color: str, window: int, metric: Optional[str] = None):
    """Each seed on its own, told apart by line style and marker: its training returns (or its `metric`) averaged in
    windows of `window` frames as a line, and (without `metric`) its evaluations as points. `seeds`: [(name, run)]."""
    for k, (seed, run) in enumerate(seeds):
        line, marker = SEED_STYLES[k % len(SEED_STYLES)]
        steps, values = run["metrics"][metric] if metric else run["train"]
        if len(steps):
            x, y = windowed_curve(steps, values, window, int(steps.max()))
            name = f"{label} {seed}" + ("" if metric else " (training)")
            ax.plot(x, y, ".", linestyle=line, color=color, linewidth=1.2, markersize=3, label=name)
        if not metric and len(run["eval"][0]):
            ax.plot(
                *run["eval"], marker, color=color, markersize=5, markerfacecolor="none", label=f"{label} {seed} (evaluation)"
            )


def metric_table_and_figure(args: Plot, pairs: list, groups: list, official_runs: list, window: int, title: str) -> list:
    """The --metric figure, one panel per (our tag, their key), each seed's values averaged in the window; returns the
    --at table's rows of those window means."""
    import matplotlib.pyplot as plt

    cols = min(len(pairs), 2)
    lines = -(-len(pairs) // cols)
    fig, axes = plt.subplots(lines, cols, figsize=(6.0 * cols, 4.0 * lines), dpi=110, squeeze=False)
    unit = "frames" if args.frames_per_step > 1 or official_runs else "policy steps"
    rows = {}  # (pair, x) -> the table's rows there
    sides = [(groups, 0, lambda d, r: seed_of(d)), (official_runs, len(groups), lambda d, r: r["seed"])]
    for p, ((ours, theirs), ax) in enumerate(zip(pairs, axes.flat)):
        for (runs_of, offset, name), key in zip(sides, (ours, theirs)):
            if not runs_of:
                continue
            if not any(len(r["metrics"].get(key, ((),))[0]) for _, _, runs in runs_of for r in runs):
                known = sorted({k for _, _, runs in runs_of for r in runs for k in r.get("tags", r["metrics"])})
                side = "--group" if offset == 0 else "--official-run"
                message = f"--metric {ours}={theirs}: no {side} run logged {key!r}; they logged {', '.join(known)}"
                raise SystemExit(f"plot_curves.py: error: {message}")
            for i, (label, run_dirs, runs) in enumerate(runs_of):
                for r in runs:
                    r["metrics"].setdefault(key, (np.zeros(0), np.zeros(0)))
                seeds = [(name(d, r), r) for d, r in zip(run_dirs, runs)]
                draw_per_seed(ax, label, seeds, f"C{offset + i}", window, metric=key)
                for x in args.at:
                    for seed, r in seeds:
                        steps, values = r["metrics"][key]
                        near = values[(steps > x - window) & (steps <= x)]
                        mean = f"{near.mean():.4g} ({len(near)} logged)" if len(near) else "-"
                        rows.setdefault((p, x), []).append(f"| {x:,} | {ours} / {theirs} | {label} {seed} | {mean} |")
        ax.set_title(f"ours {ours} / theirs {theirs}", fontsize=9)
        ax.set_xlabel(unit)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(pairs) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=2, frameon=False)
    fig.suptitle(f"{title}: training metrics, each seed averaged over windows of {window:,} {unit}", fontsize=10, wrap=True)
    fig.tight_layout(rect=(0, 0.04 + 0.025 * ((len(labels) + 1) // 2), 1, 1))
    out = args.metric_out or os.path.splitext(args.out)[0] + "_metrics.png"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, bbox_inches="tight")  # the whole legend, however long its labels
    print(f"wrote {out}")
    header = ["", "| frames | metric (ours / theirs) | run | mean over the window before |", "|---|---|---|---|"]
    return header + [row for key in sorted(rows) for row in rows[key]] if rows else []


def main(args: Plot):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not args.group and not args.official_run:
        raise SystemExit("plot_curves.py: error: pass at least one --group LABEL=GLOB (or --official-run LABEL=GLOB)")
    pairs = [label_and_value(spec, "--metric", "OURS_TAG=THEIRS_KEY") for spec in args.metric]
    hlines = []
    for spec in args.hline:
        label, value = label_and_value(spec, "--hline", "LABEL=VALUE")
        try:
            hlines.append((label, float(value)))
        except ValueError:
            raise SystemExit(f"plot_curves.py: error: --hline {spec!r}: {value!r} is not a number") from None
    fig, ax = plt.subplots(figsize=(7.0, 5.0), dpi=110)
    window = args.window * args.frames_per_step  # in frames
    rows = ["| runs | seeds | last training episodes | final evaluation | wall-clock per run |", "|---|---|---|---|---|"]
    groups, official_runs = [], []
    for spec in args.group:
        label, run_dirs = run_dirs_of(spec, "--group")
        runs = [read_run(d, tuple(ours for ours, _ in pairs)) for d in run_dirs]
        for r in runs:  # x in frames
            r["train"], r["eval"] = [(steps * args.frames_per_step, v) for steps, v in (r["train"], r["eval"])]
            r["metrics"] = {k: (steps * args.frames_per_step, v) for k, (steps, v) in r["metrics"].items()}
        groups.append((label, run_dirs, runs))
    for spec in args.official_run:
        label, run_dirs = run_dirs_of(spec, "--official-run", needs="metrics.jsonl")
        official_runs.append((label, run_dirs, [read_official_run(d) for d in run_dirs]))
    official = read_official(args.official, args.official_task) if args.official else []
    if args.official_binned:
        first, every = args.official_eval_frames
        official = [(seed, *unbin(xs, ys, args.official_binned, first, every)) for seed, xs, ys in official]
    for i, (label, run_dirs, runs) in enumerate(groups):
        color = f"C{i}"
        if args.per_seed:
            draw_per_seed(ax, label, [(seed_of(d), r) for d, r in zip(run_dirs, runs)], color, window)
        else:
            end = max(int(r["train"][0].max()) for r in runs if len(r["train"][0]))
            curves = np.array([windowed(*r["train"], window, end) for r in runs])
            x = np.minimum((np.arange(curves.shape[1]) + 1) * window, end)  # each window at its end
            with np.errstate(all="ignore"):  # windows where no seed ended an episode stay empty
                ax.plot(x, np.nanmean(curves, 0), color=color, label=f"{label} (training)")
                ax.fill_between(x, np.nanmin(curves, 0), np.nanmax(curves, 0), color=color, alpha=0.2, linewidth=0)
            eval_steps = sorted({int(s) for r in runs for s in r["eval"][0]})
            if eval_steps:
                points = [[v for r in runs for s, v in zip(*r["eval"]) if s == step] for step in eval_steps]
                means = np.array([np.mean(p) for p in points])
                spread = np.array([[m - min(p) for m, p in zip(means, points)], [max(p) - m for m, p in zip(means, points)]])
                ax.errorbar(eval_steps, means, yerr=spread, fmt="o", color=color, capsize=3, label=f"{label} (evaluation)")
    for j, (label, run_dirs, runs) in enumerate(official_runs):
        draw_per_seed(ax, label, [(r["seed"], r) for r in runs], f"C{len(groups) + j}", window)
    for label, run_dirs, runs in groups + official_runs:
        finals = [r["eval"][1][-1] for r in runs if len(r["eval"][1])]
        last = [r["train"][1][-args.last_episodes :].mean() for r in runs if len(r["train"][1])]
        walls = [r["wall"] for r in runs if "wall" in r]
        rows.append(
            f"| {label} | {len(runs)} | "
            + (f"{np.mean(last):+.2f} (min {min(last):+.2f}, max {max(last):+.2f})" if last else "none")
            + " | "
            + (f"{np.mean(finals):+.2f} (min {min(finals):+.2f}, max {max(finals):+.2f})" if finals else "none")
            + (f" | {np.mean(walls):.0f} s |" if walls else " | - |")
        )
    ends = [int(r["train"][0].max()) for _, _, runs in (groups or official_runs) for r in runs if len(r["train"][0])]
    end = max(ends) if ends else 1
    if official:
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
            # each run, ours and the official code's alike: its last evaluation at or before x (and where it was, when
            # not at x) and its training episodes in the window before x; a run that has not reached x gets dashes
            seeded = [(label, seed_of(d), r) for label, dirs, runs in groups for d, r in zip(dirs, runs)]
            seeded += [(label, r["seed"], r) for label, _, runs in official_runs for r in runs]
            for label, seed, r in seeded:
                reached = max([s.max() for s, _ in [r["train"], r["eval"], *r["metrics"].values()] if len(s)], default=0)
                before = np.nonzero(r["eval"][0] <= x)[0] if x <= reached else []
                ev = "-"
                if len(before):
                    frame, value = r["eval"][0][before[-1]], r["eval"][1][before[-1]]
                    ev = f"{value:.1f}" + (f" (at {frame:,.0f})" if frame != x else "")
                near = r["train"][1][(r["train"][0] > x - window) & (r["train"][0] <= x)]
                rows.append(
                    f"| {x:,} | {label} {seed} | {ev} | "
                    + (f"{near.mean():.1f} ({len(near)} episodes)" if len(near) and x <= reached else "-")
                    + f" | {ref} |"
                )
    if args.random is not None:
        ax.axhline(args.random, color="gray", linestyle="--", label=f"random policy ({args.random:+.2f})")
    for k, (label, value) in enumerate(hlines):
        ax.axhline(
            value, color=["black", "tab:brown", "tab:olive", "tab:cyan"][k % 4], linestyle=":", label=f"{label} ({value:g})"
        )
    labels = [label for label, _, _ in groups + official_runs] + ([args.official_label] if official else [])
    title = args.title or "episodic return: " + ", ".join(labels)
    ax.set_xlabel("frames" if args.frames_per_step > 1 or official or official_runs else "policy steps")
    ax.set_ylabel("episodic return")
    ax.set_title("\n".join(textwrap.wrap(title, 72)), fontsize=11)  # a long title in lines, not cut off
    if args.ylim:
        ax.set_ylim(*args.ylim)
    ax.grid(alpha=0.3)
    legend = ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    legend.set_in_layout(False)  # the axes keep their size however many labels: the saved PNG grows to hold them
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, bbox_inches="tight", bbox_extra_artists=[legend])  # the whole legend, however long its labels
    if pairs:
        rows += metric_table_and_figure(args, pairs, groups, official_runs, window, args.title or ", ".join(labels))
    print("\n".join(rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    import sys

    if sum(arg == "--group" for arg in sys.argv[1:]) > 1:  # tyro would keep only the last one's runs
        raise SystemExit('plot_curves.py: error: --group takes all its groups at once: --group "A=GLOB" "B=GLOB"')
    main(tyro.cli(Plot, description=__doc__))
