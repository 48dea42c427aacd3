"""Seconds per gradient step of dreamer_v2_atari.py, measured in-process on a synthetic batch.

One gradient step is exactly what the training loop does once: world model loss, backward, clip, AdamW step,
imagination from every posterior state, actor and critic losses, their backward and steps, the target-critic update.
All precisions are timed in the same process, their steps interleaved (32, bf16, 32, bf16, ...), so that on a shared
machine both see the same load; the bf16 figure is also reported as a ratio against the fp32 baseline. The CPU seconds of
this process (all threads) are printed too: on an idle machine wall ~ CPU / threads.

    python benchmarks/throughput_v2.py --precisions 32 bf16
    python benchmarks/throughput_v2.py --batch-size 16 --batch-length 50 --steps 5
"""

import copy
import os
import sys
import time
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn.functional as F
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dreamer_v2_atari as v2  # noqa: E402


@dataclass
class Bench:
    batch_size: int = 16
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
    channels: int = 1
    """image channels (1: grayscale as in the paper)"""


def make_step(bench: Bench, precision: str):
    """Build the networks, optimizers and a synthetic batch; return a function that does one timed gradient step."""
    args = v2.Args(batch_size=bench.batch_size, batch_length=bench.batch_length, precision=precision)
    device = torch.device(bench.device)
    torch.manual_seed(0)
    obs_shape = (bench.channels, 64, 64)
    wm = v2.WorldModel(obs_shape, bench.actions, args).to(device)
    feat = args.deter_size + args.stoch_size * args.classes
    actor = v2.Actor(feat, bench.actions, args.mlp_units, args.mlp_layers).to(device)
    critic = v2.Critic(feat, args.mlp_units, args.mlp_layers).to(device)
    target_critic = copy.deepcopy(critic).requires_grad_(False)
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
    opt = lambda module, lr, eps: torch.optim.AdamW(module.parameters(), lr=lr, eps=eps, weight_decay=args.weight_decay / lr)  # noqa: E731
    model_opt, actor_opt = opt(wm, args.model_lr, args.model_eps), opt(actor, args.actor_lr, args.ac_eps)
    critic_opt = opt(critic, args.critic_lr, args.ac_eps)
    scales = {"image": 1.0, "reward": 1.0, "discount": args.discount_scale, "kl": args.kl_scale}
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    updates = [0]

    def gradient_step(carry):
        with autocast:
            loss, losses, post, carry, _ = v2.world_model_loss(wm, batch, carry, scales, args)
        model_opt.zero_grad(set_to_none=True)
        v2.backward_and_clip(loss, list(wm.parameters()), args.model_grad_clip)
        model_opt.step()
        with autocast:
            start = {k: v.detach().flatten(0, 1) for k, v in post.items()}
            feats, actions = v2.imagine(wm, actor, start, args.imagination_horizon)
            first_discount = args.gamma * (1.0 - batch["is_terminal"].float().flatten(0, 1))
            actor_loss, critic_loss, _ = v2.actor_critic_loss(
                wm, actor, critic, target_critic, feats, actions, first_discount, args
            )
        actor_opt.zero_grad(set_to_none=True)
        critic_opt.zero_grad(set_to_none=True)
        v2.backward_and_clip(actor_loss, list(actor.parameters()), args.ac_grad_clip)
        v2.backward_and_clip(critic_loss, list(critic.parameters()), args.ac_grad_clip)
        actor_opt.step()
        critic_opt.step()
        v2.update_target_critic(critic, target_critic, updates[0], args.target_update_every, args.target_update_fraction)
        updates[0] += 1
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
    v2.set_malloc_for_speed()
    print(
        f"dreamer_v2_atari.py, batch {bench.batch_size} x {bench.batch_length}, {bench.device}, torch {torch.__version__}, "
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
