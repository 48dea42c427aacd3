"""Seconds per gradient step of dreamer_v3_atari.py, measured in-process on a synthetic batch.

One gradient step is exactly what the training loop does once: world model loss, backward, clip, Adam step,
imagination from every posterior state, actor and critic losses, their backward and steps, the slow-critic update.
Each precision is timed in the same process, so the bf16 figure is reported as a ratio against the fp32 baseline.

    python benchmarks/throughput.py --model-size S --precisions 32 bf16
    python benchmarks/throughput.py --model-size XS --batch-size 16 --batch-length 64 --steps 5
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
import dreamer_v3_atari as v3  # noqa: E402


@dataclass
class Bench:
    model_size: str = "S"
    """DreamerV3 model size (XS, S, M, L, XL)"""
    batch_size: int = 16
    """sequences per batch"""
    batch_length: int = 64
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
    """image channels (3: RGB as in the Atari100k recipe)"""


def build(bench: Bench, precision: str):
    args = v3.Args(model_size=bench.model_size, batch_size=bench.batch_size, batch_length=bench.batch_length,
                   precision=precision)  # fmt: skip
    v3.resolve_sizes(args)
    device = torch.device(bench.device)
    torch.manual_seed(0)
    obs_shape = (bench.channels, 64, 64)
    wm = v3.WorldModel(obs_shape, bench.actions, args).to(device)
    feat = args.deter_size + args.stoch_size * args.classes
    actor = v3.Actor(feat, bench.actions, args.mlp_units, args.mlp_layers, args.unimix).to(device)
    critic = v3.Critic(feat, args.reward_bins, args.mlp_units, args.mlp_layers).to(device)
    slow_critic = copy.deepcopy(critic).requires_grad_(False)
    return_norm = v3.ReturnNorm(args.return_norm_decay, args.return_norm_limit).to(device)
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
    carry = ({k: v.detach().clone() for k, v in wm.rssm.initial(B).items()}, torch.zeros(B, bench.actions, device=device))
    return args, device, wm, actor, critic, slow_critic, return_norm, batch, carry


def time_steps(bench: Bench, precision: str) -> float:
    args, device, wm, actor, critic, slow_critic, return_norm, batch, carry = build(bench, precision)
    model_opt = torch.optim.Adam(wm.parameters(), lr=args.model_lr, eps=args.model_eps)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr, eps=args.ac_eps)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=args.critic_lr, eps=args.ac_eps)
    scales = {"image": 1.0, "reward": 1.0, "cont": 1.0, "dyn": args.dyn_scale, "rep": args.rep_scale}
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def gradient_step(carry):
        with autocast:
            loss, losses, post, carry, _ = v3.world_model_loss(wm, batch, carry, scales, args.kl_free)
        model_opt.zero_grad(set_to_none=True)
        v3.backward_and_clip(loss, list(wm.parameters()), args.model_grad_clip)
        model_opt.step()
        with autocast:
            start = {k: v.detach().flatten(0, 1) for k, v in post.items()}
            feats, actions = v3.imagine(wm, actor, start, args.imagination_horizon)
            first_cont = 1.0 - batch["is_terminal"].float().flatten(0, 1)
            actor_loss, critic_loss, _ = v3.actor_critic_loss(
                wm, actor, critic, slow_critic, return_norm, feats, actions, first_cont, args
            )
        actor_opt.zero_grad(set_to_none=True)
        critic_opt.zero_grad(set_to_none=True)
        v3.backward_and_clip(actor_loss, list(actor.parameters()), args.ac_grad_clip)
        v3.backward_and_clip(critic_loss, list(critic.parameters()), args.ac_grad_clip)
        actor_opt.step()
        critic_opt.step()
        with torch.no_grad():
            for slow, fast in zip(slow_critic.parameters(), critic.parameters()):
                slow.lerp_(fast, args.slow_critic_fraction)
        return carry

    for _ in range(bench.warmup):
        carry = gradient_step(carry)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(bench.steps):
        carry = gradient_step(carry)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / bench.steps


if __name__ == "__main__":
    bench = tyro.cli(Bench)
    v3.set_malloc_for_speed()
    print(f"dreamer_v3_atari.py, size {bench.model_size}, batch {bench.batch_size} x {bench.batch_length}, "
          f"{bench.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
    results = {}
    for precision in bench.precisions:
        results[precision] = time_steps(bench, precision)
    base = results[bench.precisions[0]]
    print("| precision | s / gradient step | speed-up vs " + bench.precisions[0] + " |\n|---|---|---|")
    for precision, seconds in results.items():
        print(f"| {precision} | {seconds:.3f} | {base / seconds:.2f}x |")
