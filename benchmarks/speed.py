"""How fast each Dreamer script trains and acts, measured in-process on synthetic data; prints one markdown table.

For every script, precision and mode, at the paper's sizes and batch shapes (the scripts' defaults) or at the reduced
sizes of the real-benchmark runs in docs/results.md (`--size reduced`):
- seconds per gradient step: the script's own `train_step`, called as its training loop calls it, and its two halves:
  the world model (loss, backward, clip, optimizer step; timed up to the end of the world model's optimizer step) and
  the behaviour (imagination from every posterior state, actor and critic losses, backward, steps, target/slow critic);
- kernels per gradient step, from one profiled step: on a GPU the CUDA kernels launched; on the CPU the operations
  that run a kernel: eagerly the aten operators (views and allocations left out), compiled the fused kernels inductor
  generated plus the operators it leaves to libraries (matrix products, convolutions);
- with `--modes eager compiled`: the same step with the script's `--compile` (`compile_loss_fns`: the world model loss
  and the behaviour losses each compiled whole, with their backward passes; CUDA graphs on a GPU), and the compile
  time (the first compiled step's time less a timed step's);
- FLOPs per gradient step, counted by `torch.utils.flop_counter` (matrix products and convolutions, forward and
  backward), and the FLOP/s achieved, against the FLOP/s of one large matrix product of the same precision timed in the
  same process (the "matmul peak" this machine reaches from PyTorch; sized to take a fraction of a second each);
- policy steps per second of acting alone: the script's `act` (encoder, one RSSM step, actor) for one env, no env;
  and, to compare, of the script's own env alone (its `make_env` with the default --env-id, random actions).

Each gradient step runs on a batch of random frames and actions already on the device: the replay's sampling and the
copy to a GPU are not timed. Precisions and modes are interleaved step by step (32 eager, 32 compiled, bf16 eager, ...)
so that all see the same load. Run it on a quiet machine. The header names the CPU (or GPU), the instruction set torch
uses and whether bf16 is native there; where it is not (an AVX2-only CPU, where a bf16 step takes about ten times as
long) the bf16 rows run one timed step and no warm-up.

    python benchmarks/speed.py                                   # V1, V2, V3 and V2 on DMC, fp32 and bf16
    python benchmarks/speed.py --scripts v3 --precisions bf16 --steps 3
    python benchmarks/speed.py --modes eager compiled --size reduced   # eager against --compile, the runs' sizes
"""

import copy
import functools
import os
import platform
import sys
import time
import traceback
import unittest.mock
from dataclasses import dataclass, field
from typing import List, Literal

import torch
import torch.nn.functional as F
import tyro
from torch.autograd import DeviceType
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
    """scripts to measure: v1 (dreamer_v1_atari.py), v2, v3 and v2-dmc (dreamer_v2_dmc.py)"""
    precisions: List[Literal["32", "bf16"]] = field(default_factory=lambda: ["32", "bf16"])
    """precisions to measure, interleaved"""
    modes: List[Literal["eager", "compiled", "compiled-without-graphs"]] = field(default_factory=lambda: ["eager"])
    """eager: train_step as is; compiled: with the script's --compile (compile_loss_fns: on CUDA with CUDA graphs);
    compiled-without-graphs: the same without CUDA graphs (on a CPU the same as compiled); interleaved"""
    size: Literal["paper", "reduced"] = "paper"
    """paper: the scripts' defaults (V3: size S); reduced: the real-benchmark runs' sizes of docs/results.md (V1 has
    none: paper)"""
    scan_chunk: int = 8
    """compiled: the steps of observe's loop unrolled per iteration of its scan (scan_steps' chunk; the scripts use 8;
    1 is a plain scan, the batch length one iteration of every step); 0: no scan, the plain loop traced whole (the
    scan splits a CUDA graph into partitions, where torch's CUDA-graph trees failed: docs/speed.md#on-a-gpu)"""
    warmup: int = 1
    """untimed gradient steps first (a compiled mode has at least one: it compiles)"""
    steps: int = 3
    """timed gradient steps (the table gives their mean)"""
    act_steps: int = 100
    """timed policy steps (of acting alone and of the env alone)"""
    kernels: bool = True
    """count the kernels of one gradient step (one extra, profiled step)"""
    flops: bool = True
    """count the FLOPs of one gradient step (one extra, untimed step)"""
    env: bool = True
    """time the script's env alone too (needs ale-py, and dm_control for v2-dmc)"""
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    """device to run on"""
    tiny: bool = False
    """tiny networks and batches: a quick check that the benchmark runs (the figures mean nothing)"""


TINY = dict(deter_size=16, hidden_size=16, cnn_depth=2, mlp_units=16, stoch_size=4, batch_size=2, batch_length=8)
# the sizes of the real-benchmark runs of docs/results.md: Kung Fu Master (V3, V2) and cartpole-balance (V2 on DMC)
REDUCED = {
    "v1": {},
    "v2": dict(deter_size=256, hidden_size=256, cnn_depth=16, mlp_units=256),
    "v3": dict(model_size="XS", cnn_depth=16),
    "v2-dmc": dict(cnn_depth=16, mlp_units=200, mlp_layers=2, stoch_size=16, classes=16),
}


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(name: str, precision: str, mode: str, bench: Bench) -> dict:
    """The networks, optimizers and a random batch as the training loop has them; `step` runs one gradient step (the
    script's train_step) and returns the time at which the world model's optimizer step ended."""
    m, device = SCRIPTS[name], torch.device(bench.device)
    torch.manual_seed(0)
    sizes = TINY if bench.tiny else REDUCED[name] if bench.size == "reduced" else {}
    args = m.Args(precision=precision, compile=mode != "eager", **sizes)
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
    elif name == "v2-dmc":
        actor = m.Actor(feat, action_size, args.mlp_units, args.mlp_layers, args.actor_min_std).to(device)
        critic = m.Critic(feat, args.mlp_units, args.mlp_layers).to(device)
    else:
        actor = m.Actor(feat, action_size, args.mlp_units, args.mlp_layers).to(device)
        critic = m.Critic(feat, args.mlp_units, args.mlp_layers).to(device)
    target = copy.deepcopy(critic).requires_grad_(False)  # V2's target critic, V3's slow critic, unused by V1
    return_norm = v3.ReturnNorm(args.return_norm_decay, args.return_norm_limit).to(device) if name == "v3" else None
    wm.encoder.to(memory_format=torch.channels_last)
    wm.decoder.to(memory_format=torch.channels_last)
    eager_fns = loss_fns = (m.world_model_loss, m.behaviour_losses)  # what train_step calls without --compile
    if mode == "compiled-without-graphs":  # the script's torch.compile calls, less mode="reduce-overhead"
        compile_ = torch.compile
        with unittest.mock.patch.object(torch, "compile", lambda f, **kw: compile_(f, **{**kw, "mode": None})):
            loss_fns = m.compile_loss_fns(device)
    elif mode == "compiled":
        loss_fns = m.compile_loss_fns(device)
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
    # the TBPTT carry as the training loop starts it: copies of the initial state (not its expanded views)
    initial = {k: v.detach().clone() for k, v in wm.rssm.initial(B).items()}
    state = dict(carry=(initial, batch["action"][0] * 0), updates=0)
    model_step, world_model_end = model_opt.step, []

    def timed_model_step(*a, **kw):  # the end of train_step's first half
        out = model_step(*a, **kw)
        sync(device)
        world_model_end.append(time.perf_counter())
        return out

    model_opt.step = timed_model_step
    nets, opts = (wm, actor, critic), (model_opt, actor_opt, critic_opt)

    def step(eager: bool = False) -> float:
        """One gradient step of the script's train_step (`eager`: this setup's networks without --compile)."""
        fns = dict(loss_fns=eager_fns if eager else loss_fns)
        if name == "v1":
            out = m.train_step(*nets, *opts, batch, state["carry"], scales, args, autocast, **fns)
        elif name == "v3":
            out = m.train_step(*nets, target, return_norm, *opts, batch, state["carry"], scales, args, autocast, **fns)
        else:
            out = m.train_step(*nets, target, *opts, batch, state["carry"], scales, args, autocast, state["updates"], **fns)
        state["carry"], state["updates"] = out[0], state["updates"] + 1
        return world_model_end[-1]

    frame = torch.randint(0, 256, (1, *obs_shape), dtype=torch.uint8, device=device)
    agent = dict(state=wm.rssm.initial(1), action=batch["action"][0, :1] * 0)

    def act_step():
        with autocast:
            agent["state"], action = m.act(
                wm, actor, agent["state"], agent["action"], frame, torch.zeros(1, dtype=torch.bool, device=device), False
            )
        agent["action"] = action.float()
        action.cpu()  # the env needs the action on the host

    params = sum(p.numel() for n in nets for p in n.parameters())
    return dict(step=step, act=act_step, device=device, args=args, params=params)


def launches_a_kernel(event) -> bool:
    """Whether a profiled CPU operation runs a kernel: an inductor-generated one (cpp_fused_*), or an operator that is
    neither a view nor an allocation."""
    if "cpp_fused" in event.name:
        return True
    namespace, _, op = event.name.partition("::")
    if namespace not in ("aten", "mkldnn") or op.startswith("empty") or op in ("lift_fresh", "resize_", "set_"):
        return False
    packet = getattr(getattr(torch.ops, namespace), op, None)
    overload = getattr(packet, "default", None) if packet is not None else None
    return not (overload is not None and overload.is_view)


def count_kernels(step, device: torch.device) -> int:
    """Kernels of one gradient step: on a GPU the CUDA kernels and copies launched; on the CPU the innermost profiled
    operations that run a kernel (an operator's kernel runs inside it: aten::linear -> aten::addmm counts once)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        step()
        sync(device)
    events = profile.events()
    if device.type == "cuda":
        return sum(event.device_type == DeviceType.CUDA for event in events)
    kernels = [event for event in events if launches_a_kernel(event)]
    return sum(not any(launches_a_kernel(child) for child in event.cpu_children) for event in kernels)


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


def loop_steps(step, carry: dict, xs: tuple, chunk: int = 0) -> tuple:
    """--scan-chunk 0: scan_steps' eager Python loop, also under torch.compile (no scan: the compiler traces every step)."""
    ys = []
    for x in zip(*[v.unbind(0) for v in xs]):
        carry, y = step(carry, x)
        ys.append(y)
    return carry, {k: torch.stack([y[k] for y in ys]) for k in ys[0]}


def main(bench: Bench) -> int:
    """Prints the table; returns how many script, precision and mode rows failed (each printed with its error)."""
    device = torch.device(bench.device)
    v3.set_malloc_for_speed()
    torch.backends.cudnn.deterministic = True  # as the scripts run by default (--torch-deterministic)
    torch._inductor.config.cpp.enable_kernel_profile = True  # the profiler sees inductor's CPU kernels one by one
    for m in SCRIPTS.values():  # observe calls the module's scan_steps
        m.scan_steps = functools.partial(m.scan_steps, chunk=bench.scan_chunk) if bench.scan_chunk else loop_steps
    sizes = "tiny" if bench.tiny else bench.size
    print(f"torch {torch.__version__}, {hardware(device, v3)}, sizes {sizes}, scan chunk {bench.scan_chunk}", flush=True)
    # the largest product: a GPU needs 16384 to run near its peak (4096 takes a fraction of a millisecond)
    max_n = 256 if bench.tiny else 16384 if device.type == "cuda" else 4096
    peaks = {p: matmul_peak(p, device, max_n) for p in bench.precisions}
    # where bf16 is emulated (as torch reports the hardware, or as measured: a bf16 product at under half the fp32 rate,
    # e.g. with oneDNN limited to AVX2), its rows get one timed step and no warm-up: a step there takes a minute or more
    emulated = not v3.native_bf16(device) or "32" in peaks and "bf16" in peaks and peaks["bf16"][0] < peaks["32"][0] / 2
    slow = {p: p == "bf16" and emulated for p in bench.precisions}
    keys = [(p, mode) for p in bench.precisions for mode in bench.modes]
    warmup = {(p, mode): max(0 if slow[p] else bench.warmup, mode != "eager") for p, mode in keys}
    steps = {(p, mode): 1 if slow[p] else bench.steps for p, mode in keys}
    rows, env_rates, failures = [], {}, 0
    for name in bench.scripts:
        setups = {key: build(name, *key, bench) for key in keys}
        times = {key: dict(world_model=[], behaviour=[], first=None) for key in keys}
        flops, failed = None, {}
        for i in range(max(warmup[key] + steps[key] for key in keys)):
            for key, setup in list(setups.items()):  # interleaved
                if i >= warmup[key] + steps[key]:
                    continue
                sync(device)
                t0 = time.perf_counter()
                try:
                    t1 = setup["step"]()
                    sync(device)
                except Exception as error:  # one mode's failure (a compiler's, say) must not cost the other rows
                    message = (str(error).splitlines() or [""])[0][:300].replace("|", "/")  # one table cell
                    what = f"failed at gradient step {i + 1}: {type(error).__name__}: {message}"
                    traceback.print_exc()  # to stderr: where it failed
                    print(f"{name} {key[0]} {key[1]}: {what}", flush=True)
                    failed[key] = what
                    del setups[key]
                    continue
                t2 = time.perf_counter()
                if i == 0:
                    times[key]["first"] = t2 - t0
                if i >= warmup[key]:
                    times[key]["world_model"].append(t1 - t0)
                    times[key]["behaviour"].append(t2 - t1)
        failures += len(failed)
        for key in keys:  # the rows in the order of --precisions and --modes
            if key in failed:
                rows.append((name, *key, failed[key]))
                continue
            setup = setups[key]
            if bench.flops and flops is None:  # the same matrix products in every precision and mode: count them once
                with FlopCounterMode(display=False) as counter:
                    setup["step"](eager=True)
                flops = counter.get_total_flops()
            kernels = count_kernels(setup["step"], device) if bench.kernels else None
            act_steps = max(1, bench.act_steps // 10) if slow[key[0]] else bench.act_steps
            for _ in range(min(10, act_steps)):
                setup["act"]()
            sync(device)
            t0 = time.perf_counter()
            for _ in range(act_steps):
                setup["act"]()
            sync(device)
            act_rate = act_steps / (time.perf_counter() - t0)
            wm_s = sum(times[key]["world_model"]) / steps[key]
            beh_s = sum(times[key]["behaviour"]) / steps[key]
            compile_s = times[key]["first"] - wm_s - beh_s if key[1] != "eager" else None
            args = setup["args"]
            rows.append(
                (name, *key, setup["params"], args.batch_size, args.batch_length, wm_s, beh_s, kernels, compile_s, flops,
                 act_rate)
            )  # fmt: skip
        del setups
        env_rates[name] = env_rate(name, bench.act_steps) if bench.env else None
    print("\nmatmul peak: " + ", ".join(f"{p} {peaks[p][0] / 1e9:.0f} GFLOP/s ({peaks[p][1]}^3)" for p in bench.precisions))
    if any(slow.values()):
        print("bf16 is emulated on this machine: its rows are one timed step each, with no warm-up")
    base = {}  # each script's first row (eager fp32 by default): the baseline of "speed-up"
    print(
        "\n| script | precision | mode | parameters | batch | s / gradient step | world model | behaviour | speed-up "
        "| kernels / step | compile s | GFLOP / step | GFLOP/s | of matmul peak | acting, policy steps/s "
        "| env alone, policy steps/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, precision, mode, *row in rows:
        if len(row) == 1:  # this mode failed: what it raised, in the seconds column
            print(f"| {name} | {precision} | {mode} | - | - | {row[0]} |" + " - |" * 10)
            continue
        params, batch_size, batch_length, wm_s, beh_s, kernels, compile_s, flops, act = row
        total = wm_s + beh_s
        base.setdefault(name, total)
        gflop = f"{flops / 1e9:.3g}" if flops else "-"
        rate = f"{flops / total / 1e9:.3g}" if flops else "-"
        share = f"{100 * flops / total / peaks[precision][0]:.0f}%" if flops else "-"
        env = "-" if env_rates[name] is None else f"{env_rates[name]:.0f}"
        # V1's train_step computes all three gradients before its first optimizer step: no halves to tell apart
        halves = "- | -" if name == "v1" else f"{wm_s:.3f} | {beh_s:.3f}"
        print(
            f"| {name} | {precision} | {mode} | {params / 1e6:.2f}M | {batch_size} x {batch_length} | {total:.3f} "
            f"| {halves} | {base[name] / total:.2f}x | {'-' if kernels is None else kernels} "
            f"| {'-' if compile_s is None else f'{compile_s:.0f}'} | {gflop} | {rate} | {share} | {act:.0f} | {env} |"
        )


    return failures


if __name__ == "__main__":
    sys.exit(1 if main(tyro.cli(Bench)) else 0)  # non-zero when a mode failed
