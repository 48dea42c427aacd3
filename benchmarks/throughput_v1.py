"""Seconds per gradient step of dreamer_v1_atari.py, measured in-process on a synthetic batch.

One gradient step is exactly what the training loop does once: world model loss, imagination from every posterior
state with the graph kept, actor and critic losses, the three gradients, their clipping and the three Adam steps.
All precisions are timed in the same process, their steps interleaved (32, bf16, 32, bf16, ...), so that on a shared
machine both see the same load; the bf16 figure is also reported as a ratio against the fp32 baseline. The CPU seconds of
this process (all threads) are printed too: on an idle machine wall ~ CPU / threads.

    python benchmarks/throughput_v1.py --precisions 32 bf16
    python benchmarks/throughput_v1.py --batch-size 50 --batch-length 50 --steps 5
"""

import os
import sys
import time
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn.functional as F
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dreamer_v1_atari as v1  # noqa: E402


@dataclass
class Bench:
    batch_size: int = 50
    """sequences per batch"""
    batch_length: int = 50
    """steps per sequence"""
    precisions: List[str] = field(default_factory=lambda: ["32", "bf16"])
    """precisions to time, the first is the baseline"""
    warmup: int = 2
    """untimed gradient steps first"""
    steps: int = 5
    """timed gradient steps"""
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    """device to run on"""
    actions: int = 6
    """size of the discrete action space (Pong has 6)"""
    channels: int = 3
    """image channels (3: RGB as in the paper's code)"""


def make_step(bench: Bench, precision: str):
    """Build the networks, optimizers and a synthetic batch; return a function that does one timed gradient step."""
    args = v1.Args(batch_size=bench.batch_size, batch_length=bench.batch_length, precision=precision)
    device = torch.device(bench.device)
    torch.manual_seed(0)
    obs_shape = (bench.channels, 64, 64)
    wm = v1.WorldModel(obs_shape, bench.actions, args).to(device)
    feat = args.deter_size + args.stoch_size
    actor = v1.Actor(feat, bench.actions, args.mlp_units, args.actor_layers).to(device)
    critic = v1.Critic(feat, args.mlp_units, args.critic_layers).to(device)
    wm.encoder.to(memory_format=torch.channels_last)
    wm.decoder.to(memory_format=torch.channels_last)
    T, B = bench.batch_length, bench.batch_size
    batch = dict(
        obs=torch.randint(0, 256, (T, B, *obs_shape), dtype=torch.uint8, device=device),
        action=F.one_hot(torch.randint(0, bench.actions, (T, B), device=device), bench.actions).float(),
        reward=torch.randn(T, B, device=device),
        is_first=torch.zeros(T, B, dtype=torch.bool, device=device),
        is_terminal=torch.zeros(T, B, dtype=torch.bool, device=device),
    )
    carry = (wm.rssm.initial(B), torch.zeros(B, bench.actions, device=device))
    model_opt = torch.optim.Adam(wm.parameters(), lr=args.model_lr, eps=args.model_eps)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr, eps=args.ac_eps)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=args.critic_lr, eps=args.ac_eps)
    scales = {"image": 1.0, "reward": 1.0, "discount": args.discount_scale, "kl": args.kl_scale}
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def gradient_step(carry):
        with autocast:
            loss, losses, post, carry, _ = v1.world_model_loss(wm, batch, carry, scales, args)
            start = {k: v.detach().flatten(0, 1) for k, v in post.items()}
            start_weight = 1.0 - batch["is_terminal"].float().flatten(0, 1)
            feats, _ = v1.imagine(wm, actor, start, args.imagination_horizon)
            actor_loss, critic_loss, _ = v1.actor_critic_loss(wm, critic, feats, start_weight, args)
        v1.backward_and_clip(loss, list(wm.parameters()), args.model_grad_clip)
        v1.backward_and_clip(actor_loss, list(actor.parameters()), args.ac_grad_clip)
        v1.backward_and_clip(critic_loss, list(critic.parameters()), args.ac_grad_clip)
        model_opt.step()
        actor_opt.step()
        critic_opt.step()
        return carry

    state = [carry]

    def timed_step() -> tuple:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start, cpu = time.perf_counter(), time.process_time()
        state[0] = gradient_step(state[0])
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, time.process_time() - cpu

    return timed_step


if __name__ == "__main__":
    bench = tyro.cli(Bench)
    v1.set_malloc_for_speed()
    print(
        f"dreamer_v1_atari.py, batch {bench.batch_size} x {bench.batch_length}, {bench.device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    steps = {precision: make_step(bench, precision) for precision in bench.precisions}
    results = {precision: [] for precision in bench.precisions}
    for i in range(bench.warmup + bench.steps):
        for precision, step in steps.items():
            seconds = step()
            if i >= bench.warmup:
                results[precision].append(seconds)
    base = sum(cpu for _, cpu in results[bench.precisions[0]]) / bench.steps
    print(
        "| precision | wall s / step (mean, min) | CPU s / step (mean) | each step (wall) "
        f"| CPU speed-up vs {bench.precisions[0]} |"
    )
    print("|---|---|---|---|---|")
    for precision, times in results.items():
        wall, cpu = [t for t, _ in times], [c for _, c in times]
        mean_cpu = sum(cpu) / len(cpu)
        print(
            f"| {precision} | {sum(wall) / len(wall):.2f}, {min(wall):.2f} | {mean_cpu:.2f} "
            f"| {' '.join(f'{t:.2f}' for t in wall)} | {base / mean_cpu:.2f}x |"
        )
