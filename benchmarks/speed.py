"""How fast each Dreamer script trains and acts, measured in-process on synthetic data; prints one markdown table.

For every script and precision, at the paper's sizes and batch shapes (the scripts' defaults):
- seconds per gradient step, and its two halves: the world model (loss, backward, clip, optimizer step) and the
  behaviour (imagination from every posterior state, actor and critic losses, backward, steps, target/slow critic);
- FLOPs per gradient step, counted by `torch.utils.flop_counter` (matrix products and convolutions, forward and
  backward), and the FLOP/s achieved, against the FLOP/s of one large matrix product of the same precision timed in the
  same process (the "matmul peak" this machine reaches from PyTorch; sized to take a fraction of a second each);
- policy steps per second of acting alone: the script's `act` (encoder, one RSSM step, actor) for one env, no env;
  and, to compare, of the script's own env alone (its `make_env` with the default --env-id, random actions).

Each gradient step runs the scripts' own functions in the order of their train_step (world model, then behaviour), on
a batch of random frames and actions already on the device: the replay's sampling and the copy to a GPU are not timed.
Precisions are interleaved step by step (32, bf16, 32, bf16, ...), so that both see the same load. Run it on a quiet
machine. The header names the CPU (or GPU), the instruction set torch uses and whether bf16 is native there; where it
is not (an AVX2-only CPU, where a bf16 step takes about ten times as long) the bf16 rows run one timed step and no
warm-up.

    python benchmarks/speed.py                                   # V1, V2, V3 and V2 on DMC, fp32 and bf16
    python benchmarks/speed.py --scripts v3 --precisions bf16 --steps 3
    python benchmarks/speed.py --compile                         # with each script's --compile
"""

import copy
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import List, Literal

import torch
import torch.nn.functional as F
import tyro
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dreamer_v1_atari as v1  # noqa: E402
import dreamer_v2_atari as v2  # noqa: E402
import dreamer_v2_dmc as v2_dmc  # noqa: E402
import dreamer_v3_atari as v3  # noqa: E402

SCRIPTS = {"v1": v1, "v2": v2, "v3": v3, "v2-dmc": v2_dmc}


@dataclass
class Bench:
    scripts: List[Literal["v1", "v2", "v3", "v2-dmc"]] = field(default_factory=lambda: ["v1", "v2", "v3", "v2-dmc"])
    """scripts to measure: v1 (dreamer_v1_atari.py), v2, v3 (size S) and v2-dmc (dreamer_v2_dmc.py)"""
    precisions: List[Literal["32", "bf16"]] = field(default_factory=lambda: ["32", "bf16"])
    """precisions to measure, interleaved"""
    warmup: int = 1
    """untimed gradient steps first"""
    steps: int = 3
    """timed gradient steps (the table gives their mean)"""
    act_steps: int = 100
    """timed policy steps (of acting alone and of the env alone)"""
    compile: bool = False
    """torch.compile what each script's --compile compiles"""
    flops: bool = True
    """count the FLOPs of one gradient step (one extra, untimed step)"""
    env: bool = True
    """time the script's env alone too (needs ale-py, and dm_control for v2-dmc)"""
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    """device to run on"""
    tiny: bool = False
    """tiny networks and batches: a quick check that the benchmark runs (the figures mean nothing)"""


TINY = dict(deter_size=16, hidden_size=16, cnn_depth=2, mlp_units=16, stoch_size=4, batch_size=2, batch_length=8)


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(name: str, precision: str, bench: Bench) -> dict:
    """The networks, optimizers, a random batch and the two halves of one gradient step, as the training loop has them."""
    m, device = SCRIPTS[name], torch.device(bench.device)
    torch.manual_seed(0)
    args = m.Args(precision=precision, compile=bench.compile, **(TINY if bench.tiny else {}))
    if name == "v3":
        v3.resolve_sizes(args)
    channels = 1 if getattr(args, "grayscale", False) else 3
    continuous = name == "v2-dmc"
    action_size = 6  # Pong's 6 actions; walker-walk's 6 action dimensions
    obs_shape = (channels, 64, 64)
    wm = m.WorldModel(obs_shape, action_size, args).to(device)
    feat = args.deter_size + (args.stoch_size * args.classes if hasattr(args, "classes") else args.stoch_size)
    if name == "v1":
        actor = m.Actor(feat, action_size, args.mlp_units, args.actor_layers).to(device)
        critic = m.Critic(feat, args.mlp_units, args.critic_layers).to(device)
    elif name == "v3":
        actor = m.Actor(feat, action_size, args.mlp_units, args.mlp_layers, args.unimix).to(device)
        critic = m.Critic(feat, args.reward_bins, args.mlp_units, args.mlp_layers).to(device)
    else:
        actor = m.Actor(feat, action_size, args.mlp_units, args.mlp_layers).to(device)
        critic = m.Critic(feat, args.mlp_units, args.mlp_layers).to(device)
    target = copy.deepcopy(critic).requires_grad_(False)  # V2's target critic, V3's slow critic, unused by V1
    return_norm = v3.ReturnNorm(args.return_norm_decay, args.return_norm_limit).to(device) if name == "v3" else None
    wm.encoder.to(memory_format=torch.channels_last)
    wm.decoder.to(memory_format=torch.channels_last)
    if bench.compile and hasattr(m, "compile_gradient_step"):  # the whole step (V3 so far)
        m.compile_gradient_step(device)
    elif bench.compile:
        wm.encoder.forward = torch.compile(wm.encoder.forward)
        wm.decoder.forward = torch.compile(wm.decoder.forward)
        wm.rssm.deter_step = torch.compile(wm.rssm.deter_step)  # the GRU step of observe's loop
        wm.rssm.img_step = torch.compile(wm.rssm.img_step)
        wm.rssm.obs_step = torch.compile(wm.rssm.obs_step)
    T, B = args.batch_length, args.batch_size
    if continuous:
        actions = torch.rand(T, B, action_size, device=device) * 2 - 1
    else:
        actions = F.one_hot(torch.randint(0, action_size, (T, B), device=device), action_size).float()
    batch = dict(
        obs=torch.randint(0, 256, (T, B, *obs_shape), dtype=torch.uint8, device=device),
        action=actions,
        reward=torch.randn(T, B, device=device),
        is_first=torch.zeros(T, B, dtype=torch.bool, device=device),
        is_terminal=torch.zeros(T, B, dtype=torch.bool, device=device),
    )
    if name in ("v2", "v2-dmc"):  # AdamW with the paper's decay, as in the scripts
        opt = lambda module, lr, eps: torch.optim.AdamW(  # noqa: E731
            module.parameters(), lr=lr, eps=eps, weight_decay=args.weight_decay / lr, fused=True
        )
    else:
        opt = lambda module, lr, eps: torch.optim.Adam(module.parameters(), lr=lr, eps=eps, fused=True)  # noqa: E731
    model_opt, actor_opt = opt(wm, args.model_lr, args.model_eps), opt(actor, args.actor_lr, args.ac_eps)
    critic_opt = opt(critic, args.critic_lr, args.ac_eps)
    if name == "v3":
        scales = {"image": 1.0, "reward": 1.0, "cont": 1.0, "dyn": args.dyn_scale, "rep": args.rep_scale}
    elif name == "v2-dmc":
        scales = {"image": 1.0, "reward": 1.0, "kl": args.kl_scale}
    else:
        scales = {"image": 1.0, "reward": 1.0, "discount": args.discount_scale, "kl": args.kl_scale}
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    state = dict(carry=({k: v.detach() for k, v in wm.rssm.initial(B).items()}, batch["action"][0] * 0), updates=0)

    def world_model_step() -> dict:
        with autocast:
            loss, _, post, state["carry"], _ = m.world_model_loss(
                wm, batch, state["carry"], scales, args.kl_free if name == "v3" else args
            )
        model_opt.zero_grad(set_to_none=True)
        m.backward_and_clip(loss, list(wm.parameters()), args.model_grad_clip)
        model_opt.step()
        return {k: v.detach().flatten(0, 1) for k, v in post.items()}  # [T * B, ...]: the imagination's start states

    def behaviour_step(start: dict):
        first = 1.0 - batch["is_terminal"].float().flatten(0, 1)
        with autocast:
            if name == "v1":
                feats, _ = m.imagine(wm, actor, start, args.imagination_horizon)
                actor_loss, critic_loss, _ = m.actor_critic_loss(wm, critic, feats, first, args)
            elif name == "v3":
                post = {k: v.unflatten(0, (T, B)) for k, v in start.items()}
                actor_loss, critic_loss, _ = m.behaviour_losses(wm, actor, critic, target, return_norm, post, batch, args)
            else:
                feats, imagined, policy = m.imagine(wm, actor, start, args.imagination_horizon)
                actor_loss, critic_loss, _ = m.actor_critic_loss(
                    wm, critic, target, feats, imagined, policy, args.gamma * first, args
                )
        actor_opt.zero_grad(set_to_none=True)
        critic_opt.zero_grad(set_to_none=True)
        if name == "v3":  # as its train_step: one backward pass through both losses
            (actor_loss + critic_loss).backward()
            m.average_and_clip(list(actor.parameters()), args.ac_grad_clip)
            m.average_and_clip(list(critic.parameters()), args.ac_grad_clip)
        else:
            m.backward_and_clip(actor_loss, list(actor.parameters()), args.ac_grad_clip)
            m.backward_and_clip(critic_loss, list(critic.parameters()), args.ac_grad_clip)
        actor_opt.step()
        critic_opt.step()
        if name == "v3":
            with torch.no_grad():
                for slow, fast in zip(target.parameters(), critic.parameters()):
                    slow.lerp_(fast, args.slow_critic_fraction)
        elif name != "v1":
            m.update_target_critic(critic, target, state["updates"], args.target_update_every, args.target_update_fraction)
        state["updates"] += 1

    frame = torch.randint(0, 256, (1, *obs_shape), dtype=torch.uint8, device=device)
    agent = dict(state=wm.rssm.initial(1), action=batch["action"][0, :1] * 0)

    def act_step():
        with autocast:
            agent["state"], action = m.act(
                wm, actor, agent["state"], agent["action"], frame, torch.zeros(1, dtype=torch.bool, device=device), False
            )
        agent["action"] = action.float()
        action.cpu()  # the env needs the action on the host

    return dict(world_model=world_model_step, behaviour=behaviour_step, act=act_step, device=device, args=args)


def env_rate(name: str, steps: int) -> float:
    """Policy steps per second of the script's env alone (default --env-id, random actions, resets included)."""
    m, args = SCRIPTS[name], SCRIPTS[name].Args()
    m.check_env(args)  # as the script does at start-up (registers ale-py's envs)
    env = m.make_env(args.env_id, 0, 0, False, "speed")()
    env.action_space.seed(0)
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def matmul_peak(precision: str, device: torch.device, max_n: int = 4096, seconds: float = 0.2, repeats: int = 5) -> tuple:
    """(FLOP/s, n) of an n x n x n matrix product in this precision, the best of `repeats`: n doubles from 512 up to
    max_n while one product takes under `seconds`, so that it ends in seconds where bf16 is emulated (1 GFLOP/s)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    n = min(512, max_n)
    while True:
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        a @ b
        best = float("inf")
        for _ in range(repeats):
            sync(device)
            start = time.perf_counter()
            a @ b
            sync(device)
            best = min(best, time.perf_counter() - start)
        if best >= seconds or n >= max_n:
            return 2 * n**3 / best, n
        n *= 2


def hardware(device: torch.device, script) -> str:
    """The machine in one line: the CPU's model (or the GPU's name), torch's instruction set, whether bf16 is native."""
    native = "yes" if script.native_bf16(device) else "no (emulated)"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}, native bf16 {native}"
    model = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    flags = [name for name, has in (("AVX512-BF16", torch.cpu._is_avx512_bf16_supported()),
                                    ("AMX", torch.cpu._is_amx_tile_supported())) if has]  # fmt: skip
    isa = torch.backends.cpu.get_cpu_capability() + "".join(f" + {flag}" for flag in flags)
    return f"{model}, {torch.get_num_threads()} threads, torch ISA {isa}, native bf16 {native}"


def main(bench: Bench):
    device = torch.device(bench.device)
    v3.set_malloc_for_speed()
    torch.backends.cudnn.deterministic = True  # as the scripts run by default (--torch-deterministic)
    print(f"torch {torch.__version__}, {hardware(device, v3)}, compile {bench.compile}", flush=True)
    # the largest product: a GPU needs 16384 to run near its peak (4096 takes a fraction of a millisecond)
    max_n = 256 if bench.tiny else 16384 if device.type == "cuda" else 4096
    peaks = {p: matmul_peak(p, device, max_n) for p in bench.precisions}
    # where bf16 is emulated (as torch reports the hardware, or as measured: a bf16 product at under half the fp32 rate,
    # e.g. with oneDNN limited to AVX2), its rows get one timed step and no warm-up: a step there takes a minute or more
    emulated = not v3.native_bf16(device) or "32" in peaks and "bf16" in peaks and peaks["bf16"][0] < peaks["32"][0] / 2
    slow = {p: p == "bf16" and emulated for p in bench.precisions}
    warmup = {p: 0 if slow[p] else bench.warmup for p in bench.precisions}
    steps = {p: 1 if slow[p] else bench.steps for p in bench.precisions}
    rows, env_rates = [], {}
    for name in bench.scripts:
        setups = {p: build(name, p, bench) for p in bench.precisions}
        times = {p: dict(world_model=[], behaviour=[]) for p in bench.precisions}
        flops = None
        for i in range(bench.warmup + bench.steps):
            for precision, setup in setups.items():  # interleaved
                if i >= warmup[precision] + steps[precision]:
                    continue
                sync(device)
                t0 = time.perf_counter()
                start = setup["world_model"]()
                sync(device)
                t1 = time.perf_counter()
                setup["behaviour"](start)
                sync(device)
                t2 = time.perf_counter()
                if i >= warmup[precision]:
                    times[precision]["world_model"].append(t1 - t0)
                    times[precision]["behaviour"].append(t2 - t1)
        for precision, setup in setups.items():
            if bench.flops and flops is None:  # the same matrix products in every precision: count them once
                with FlopCounterMode(display=False) as counter:
                    setup["behaviour"](setup["world_model"]())
                flops = counter.get_total_flops()
            act_steps = max(1, bench.act_steps // 10) if slow[precision] else bench.act_steps
            for _ in range(min(10, act_steps)):
                setup["act"]()
            sync(device)
            t0 = time.perf_counter()
            for _ in range(act_steps):
                setup["act"]()
            sync(device)
            act_rate = act_steps / (time.perf_counter() - t0)
            wm_s = sum(times[precision]["world_model"]) / steps[precision]
            beh_s = sum(times[precision]["behaviour"]) / steps[precision]
            args = setup["args"]
            rows.append((name, precision, args.batch_size, args.batch_length, wm_s, beh_s, flops, act_rate))
        del setups
        env_rates[name] = env_rate(name, bench.act_steps) if bench.env else None
    fp32 = {name: wm + beh for name, precision, _, _, wm, beh, _, _ in rows if precision == "32"}
    print("\nmatmul peak: " + ", ".join(f"{p} {peaks[p][0] / 1e9:.0f} GFLOP/s ({peaks[p][1]}^3)" for p in bench.precisions))
    if any(slow.values()):
        print("bf16 is emulated on this machine: its rows are one timed step each, with no warm-up")
    print(
        "\n| script | precision | batch | s / gradient step | world model | behaviour | vs fp32 | GFLOP / step "
        "| GFLOP/s | of matmul peak | acting, policy steps/s | env alone, policy steps/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, precision, batch_size, batch_length, wm_s, beh_s, flops, act_rate in rows:
        total = wm_s + beh_s
        speedup = f"{fp32[name] / total:.2f}x" if name in fp32 else "-"
        gflop = f"{flops / 1e9:.3g}" if flops else "-"
        rate = f"{flops / total / 1e9:.3g}" if flops else "-"
        share = f"{100 * flops / total / peaks[precision][0]:.0f}%" if flops else "-"
        env = "-" if env_rates[name] is None else f"{env_rates[name]:.0f}"
        print(
            f"| {name} | {precision} | {batch_size} x {batch_length} | {total:.2f} | {wm_s:.2f} | {beh_s:.2f} | {speedup} "
            f"| {gflop} | {rate} | {share} | {act_rate:.0f} | {env} |"
        )


if __name__ == "__main__":
    main(tyro.cli(Bench))
