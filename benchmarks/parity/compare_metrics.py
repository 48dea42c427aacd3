"""The training metrics of the official DreamerV2 runs beside ours, as interval means in frame bins (one markdown table),
then every evaluation return of every run with its frame count.

    python benchmarks/parity/compare_metrics.py \
        --official benchmarks/curves/parity/official_cartpole_balance_reduced_{1,2} \
        --ours benchmarks/curves/parity/cartpole-balance__parity_fp32__{1,2}__*

The official code logs metrics.jsonl with its step in frames; ours logs TensorBoard scalars at policy steps, which
--frames-per-step (the action repeat) turns into frames. Each cell lists the runs in the order given, official first.
Image losses are shown less the constant of the unit Gaussian's log-likelihood (0.5 log(2 pi) per pixel), which both
include, so that what the model learns shows.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

import numpy as np
import tyro
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# official metrics.jsonl key -> our TensorBoard tag (the same quantity: see docs/parity.md's metric table)
PAIRS = {
    "image_loss": "losses/image",
    "reward_loss": "losses/reward",
    "kl_loss": "losses/kl",
    "prior_ent": "losses/prior_entropy",
    "post_ent": "losses/post_entropy",
    "model_grad_norm": "losses/model_grad_norm",
    "actor_loss": "losses/actor",
    "actor_ent": "losses/actor_entropy",
    "critic_loss": "losses/critic",
    "critic": "losses/value",
}


@dataclass
class Compare:
    official: List[Path]
    """the official runs' logdirs (each with metrics.jsonl)"""
    ours: List[Path]
    """our runs' directories (TensorBoard event files)"""
    frames_per_step: int = 2
    """frames per policy step of our runs (the action repeat)"""
    bins: List[int] = field(default_factory=lambda: [0, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000])
    """bin edges in frames"""
    pixels: int = 64 * 64 * 3
    """pixels per frame, for the image loss's constant"""


def binned(points: list, edges: list) -> list:
    steps, values = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    means = []
    for low, high in zip(edges, edges[1:]):
        inside = (steps >= low) & (steps < high)
        means.append(values[inside].mean() if inside.any() else math.nan)
    return means


def main(c: Compare):
    constant = c.pixels * 0.5 * math.log(2 * math.pi)
    runs, evals = [], []  # per run: {official key: [(frames, value)]}; [(frames, return)]
    for logdir in c.official:
        records = [json.loads(line) for line in open(logdir / "metrics.jsonl")]
        runs.append({k: [(r["step"], r[k]) for r in records if k in r] for k in PAIRS})
        evals.append([(r["step"], r["eval_return"]) for r in records if "eval_return" in r])
    for run_dir in c.ours:
        events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}, purge_orphaned_data=False)
        events.Reload()
        runs.append({k: [(c.frames_per_step * e.step, e.value) for e in events.Scalars(tag)] for k, tag in PAIRS.items()})
        # a resumed run logs again the evaluations after its checkpoint: keep each step's last
        last = (
            {e.step: e.value for e in events.Scalars("eval/episodic_return")}
            if "eval/episodic_return" in events.Tags()["scalars"]
            else {}
        )
        evals.append([(c.frames_per_step * step, value) for step, value in sorted(last.items())])
    labels = [f"official {p.name}" for p in c.official] + [f"ours {p.name}" for p in c.ours]
    print("runs, in each cell's order: " + "; ".join(labels) + "\n")
    ranges = [f"{low // 1000}k-{high // 1000}k" for low, high in zip(c.bins, c.bins[1:])]
    print("| metric (official / ours) | " + " | ".join(ranges) + " |")
    print("|---" * (len(ranges) + 1) + "|")
    for key, tag in PAIRS.items():
        shift = constant if key == "image_loss" else 0.0
        columns = [binned([(s, v - shift) for s, v in run[key]], c.bins) if run[key] else [math.nan] * len(ranges)
                   for run in runs]  # fmt: skip
        official, ours = columns[: len(c.official)], columns[len(c.official) :]
        cells = [", ".join(f"{col[i]:.3g}" for col in official) + " / " + ", ".join(f"{col[i]:.3g}" for col in ours)
                 for i in range(len(ranges))]  # fmt: skip
        name = f"{key} / {tag}" + (" (less the constant)" if shift else "")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nevaluation returns, frames: return (the official `eval_return`, our `eval/episodic_return`)\n")
    for label, points in zip(labels, evals):
        print(f"- {label}: " + ", ".join(f"{frames / 1000:g}k: {value:.0f}" for frames, value in points))


if __name__ == "__main__":
    main(tyro.cli(Compare))
