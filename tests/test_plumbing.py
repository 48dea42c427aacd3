"""The run plumbing (resume, checkpoints, torchrun, logging, --eval-model, the end-of-run checks) is one section, the
same text in every script, so that `diff` between two scripts shows the algorithm; and the main blocks keep no plumbing
of their own: no `global`, no function defined inside them."""

import ast
import difflib
import inspect
import math
import re
import time
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dreamer_v1_atari as v1
import dreamer_v2_atari as v2
import dreamer_v2_dmc as v2_dmc
import dreamer_v3_atari as v3
from tests.helpers import ROOT

SCRIPTS = ["dreamer_v1_atari.py", "dreamer_v2_atari.py", "dreamer_v3_atari.py", "dreamer_v2_dmc.py"]
# the section stands after the env and flag checks (make_env ... check_args) and before the algorithm, which leads into
# the main block that drives it
START, END, MAIN = "# TRY NOT TO MODIFY: run plumbing.", "\n# ALGO LOGIC: helpers\n", '\nif __name__ == "__main__":'
# Lines of the section allowed to differ between scripts. None so far: what differs (the env checks, the model's name
# in the start-up line) lives in each script's own check_env / check_args / describe_model, which the section calls.
ALLOWED_TO_DIFFER: set = set()
# what the section calls in the script around it: each script must define these, with these parameters
SCRIPT_HOOKS = {"check_args": ["args"], "check_env": ["args"], "describe_model": ["args"], "fail": ["message"]}


def plumbing(script: str) -> str:
    text = (ROOT / script).read_text()
    assert text.count(START) == 1, f"{script}: the plumbing section's marker must appear once"
    assert text.count(END) == 1, f"{script}: the helpers' marker must appear once"
    start, end = text.index(START), text.index(END)
    assert text.index("\ndef check_args(") < start < end < text.index(MAIN), f"{script}: the sections are out of order"
    return text[start:end]


def main_block(script: str) -> str:
    text = (ROOT / script).read_text()
    return text[text.index(MAIN) + 1 :]


@pytest.mark.parametrize("script", SCRIPTS[:2] + SCRIPTS[3:])
def test_the_plumbing_section_is_the_same_text_in_every_script(script: str):
    reference, other = plumbing("dreamer_v3_atari.py").splitlines(), plumbing(script).splitlines()
    changed = [
        line
        for line in difflib.unified_diff(reference, other, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip() not in ALLOWED_TO_DIFFER
    ]
    assert not changed, f"{script} differs from dreamer_v3_atari.py in the plumbing section:\n" + "\n".join(changed)


def test_the_section_holds_the_plumbing():
    section = plumbing("dreamer_v3_atari.py")
    for name in ("save_checkpoint", "load_checkpoint", "NonFinite", "choose_precision", "Run"):
        assert re.search(rf"^(def|class) {name}\b", section, re.M), name
    for method in ("register", "start", "save", "stop_requested", "log_progress", "log_eval", "finish", "finish_eval_model"):
        assert re.search(rf"^    def {method}\(", section, re.M), method


@pytest.mark.parametrize("module", [v1, v2, v3, v2_dmc], ids=lambda m: m.__name__)
def test_every_script_defines_what_the_section_calls(module):
    for name, params in SCRIPT_HOOKS.items():
        assert list(inspect.signature(getattr(module, name)).parameters) == params, name


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_main_block_keeps_no_plumbing(script: str):
    block = main_block(script)
    tree = ast.parse(block)
    nested = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert not nested, f"{script}: functions defined in the main block: {nested}"
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Global, ast.Nonlocal))], f"{script}: `global` in main"
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)], f"{script}: a lambda in the main block"
    for plumbing_call in ("save_checkpoint(", "dist.", "signal.", "wandb.", "SummaryWriter("):
        assert plumbing_call not in block, f"{script}: {plumbing_call} belongs in the plumbing section"
    assert len(block.splitlines()) <= 150, f"{script}: the main block has {len(block.splitlines())} lines (at most 150)"


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_script_rebinds_a_name_of_its_module(script: str):
    """No `global` or `nonlocal` anywhere in a script: train_step runs the functions its arguments name (--compile
    passes compiled copies as loss_fns), never a module name that something rebound."""
    tree = ast.parse((ROOT / script).read_text())
    assert not [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Global, ast.Nonlocal))], f"{script}: `global`"


@pytest.mark.parametrize("num_envs, world_size", [(1, 1), (3, 2), (16, 1), (7, 4)])
def test_a_periodic_checkpoint_falls_once_in_every_checkpoint_interval(num_envs: int, world_size: int):
    """The policy step grows by num_envs x world_size per iteration; Run.checkpoint_due is true at exactly one iteration
    of every --checkpoint-every policy steps, the first one at or past each multiple; with 0, never."""
    stride = num_envs * world_size
    steps = range(stride, 20_000 + stride, stride)  # to the first step at or past 20,000
    for every in (100, 250, 1000):
        run = SimpleNamespace(args=SimpleNamespace(checkpoint_every=every, num_envs=num_envs, world_size=world_size))
        due = [step for step in steps if v3.Run.checkpoint_due(run, step)]
        assert due == [next(s for s in steps if s >= k * every) for k in range(1, 20_000 // every + 1)], every
    run = SimpleNamespace(args=SimpleNamespace(checkpoint_every=0, num_envs=num_envs, world_size=world_size))
    assert not any(v3.Run.checkpoint_due(run, step) for step in steps)


# ---------------------------------------------------------------- init_weights


class BlockLinear(nn.Module):
    """A fork's new layer: a 3-D weight from torch.empty, which init_weights has no rule for."""

    def __init__(self, blocks: int = 2, size: int = 3):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(blocks, size, size))


class BlockLinearWithReset(BlockLinear):
    def reset_parameters(self):
        nn.init.orthogonal_(self.weight)


@pytest.mark.parametrize("module", [v1, v2, v3, v2_dmc], ids=lambda m: m.__name__)
def test_init_weights_stops_on_a_layer_it_has_no_rule_for(module):
    net = nn.Sequential(nn.Linear(3, 3), BlockLinear())
    with pytest.raises(SystemExit) as stop:
        module.init_weights(net)
    assert "init_weights: Sequential.1 (BlockLinear) has parameters with no initialisation rule (weight (2, 3, 3))" in str(
        stop.value
    )
    net = nn.Sequential(nn.Linear(3, 3), BlockLinearWithReset(), nn.LayerNorm(3))
    net[1].weight.data.fill_(float("nan"))
    net[2].weight.data.fill_(float("nan"))
    module.init_weights(net)  # a layer with reset_parameters() initialises itself
    assert all(torch.isfinite(p).all() for p in net.parameters())
    assert torch.equal(net[2].weight, torch.ones(3))


@pytest.mark.parametrize("module", [v1, v2, v3, v2_dmc], ids=lambda m: m.__name__)
def test_every_parameter_of_the_networks_is_initialised(module, monkeypatch):
    """Build the world model with torch.empty memory poisoned to NaN: init_weights must overwrite every parameter."""
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: empty(*a, **kw).fill_(float("nan")))
    sizes = dict(deter_size=8, hidden_size=8, cnn_depth=2, mlp_units=8, stoch_size=2)
    args = module.Args(**sizes, **({"mlp_layers": 1} if hasattr(module.Args, "mlp_layers") else {}))
    wm = module.WorldModel((3, 64, 64), 3, args)
    bad = [name for name, p in wm.named_parameters() if not torch.isfinite(p).all()]
    assert not bad, bad


# ---------------------------------------------------------------- what log_progress writes


class Recorder:
    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, float(value)))


def fake_run(module, action_space):
    """A Run of `module` with only what log_progress, note_train and note_actions read."""
    run = object.__new__(module.Run)
    run.args = SimpleNamespace(rank=0, world_size=1, num_envs=1, log_every=100, total_timesteps=1000, replay_ratio=1.0,
                               learning_starts=0, track=False, capture_video=False)  # fmt: skip
    run.writer, run.envs, run.uploaded_videos = Recorder(), SimpleNamespace(single_action_space=action_space), set()
    run.nonfinite = module.NonFinite(0, torch.device("cpu"))
    run.start_time, run.train_seconds, run.start_step, run.start_gradient_steps = time.time() - 10, 1.0, 0, 0
    run.last_progress, run.metric_sums, run.metric_count, run.action_sums = time.time(), {}, 0, None
    return run


def test_training_metrics_are_averaged_over_the_logging_interval(capsys):
    import gymnasium as gym

    run = fake_run(v3, gym.spaces.Box(-1, 1, (2,)))
    checks = {"loss": torch.tensor(1.0)}
    for loss in (1.0, 2.0, 6.0):
        run.note_train({"losses/model": torch.tensor(loss)}, checks, 50)
    for action in ([0.5, -1.0], [-0.5, 1.0]):
        run.note_actions(torch.tensor([action]))
    loop = v3.Loop(global_step=99, train_policy_steps=99, gradient_steps=3)
    run.log_progress(loop, [])
    assert run.writer.scalars == {} and capsys.readouterr().out == ""  # not due, and under 30 s since the last line
    loop.global_step = 100
    run.log_progress(loop, [])
    scalars = run.writer.scalars
    assert scalars["losses/model"] == [(100, 3.0)]  # the mean of the 3 gradient steps, not the last one
    assert scalars["actions/mean"] == [(100, 0.0)] and scalars["actions/abs_mean"] == [(100, 0.75)]
    assert scalars["actions/std"] == [(100, 0.75)]  # dimension 0: 0.5, dimension 1: 1.0
    assert "step 100/1000 (10%)" in capsys.readouterr().out
    run.note_train({"losses/model": torch.tensor(10.0)}, checks, 150)
    loop.global_step, loop.gradient_steps = 200, 4
    run.log_progress(loop, [])
    assert scalars["losses/model"][-1] == (200, 10.0)  # the sums start again after each log


def test_discrete_actions_log_their_entropy_and_the_top_share():
    import gymnasium as gym

    run = fake_run(v2, gym.spaces.Discrete(4))
    for index in (0, 0, 0, 1):
        run.note_actions(F.one_hot(torch.tensor([index]), 4).float())
    run.log_progress(v2.Loop(global_step=100), [])
    assert run.writer.scalars["actions/top_share"] == [(100, 0.75)]
    assert run.writer.scalars["actions/entropy"][0][1] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))


def test_the_progress_line_comes_every_30_seconds_once_training_runs(capsys):
    import gymnasium as gym

    run = fake_run(v1, gym.spaces.Discrete(2))
    run.last_progress = time.time() - 31
    run.log_progress(v1.Loop(global_step=30, train_policy_steps=30, gradient_steps=0), [])
    assert capsys.readouterr().out == ""  # no gradient step yet: the line waits for --log-every
    run.log_progress(v1.Loop(global_step=31, train_policy_steps=31, gradient_steps=1), [])
    assert "step 31/1000 (3%)" in capsys.readouterr().out
    assert run.writer.scalars == {}  # TensorBoard still records only every --log-every
    run.log_progress(v1.Loop(global_step=32, train_policy_steps=32, gradient_steps=2), [])
    assert capsys.readouterr().out == ""  # the next one 30 s later


def test_the_ranks_compare_their_stop_flags_every_16th_iteration_on_the_cpu(monkeypatch):
    calls = []

    def all_reduce(tensor, group=None):
        calls.append(tensor.device.type)
        tensor.mul_(2)  # as if the other rank had the same flag

    monkeypatch.setattr(v3.dist, "all_reduce", all_reduce)
    run = SimpleNamespace(args=SimpleNamespace(world_size=2, num_envs=3), stop_signal=[15], cpu_group=None, stopped=False)
    stride = 6
    stops = [v3.Run.stop_requested(run, step) for step in range(stride, 40 * stride + 1, stride)]
    assert [i + 1 for i, stop in enumerate(stops) if stop] == [16, 32]  # iterations 16 and 32: the same on every rank
    assert calls == ["cpu", "cpu"]
    run.args.world_size = 1
    assert v3.Run.stop_requested(run, 7) and calls == ["cpu", "cpu"]  # one process: at once, without a collective


def test_device_batch_is_the_same_class_in_every_script():
    texts = {inspect.getsource(m.DeviceBatch) for m in (v1, v2, v2_dmc, v3)}
    assert len(texts) == 1, "DeviceBatch differs between the scripts"


def test_device_batch_on_the_cpu_uses_the_replay_arrays_without_a_copy():
    import numpy as np

    batch = dict(obs=np.zeros((4, 2, 3), np.uint8), is_first=np.ones((4, 2), bool))
    tensors = v3.DeviceBatch(torch.device("cpu"), static=True)(batch)
    tensors["obs"][0, 0, 0] = 7
    assert batch["obs"][0, 0, 0] == 7 and tensors["is_first"].dtype == torch.bool


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("static", [False, True])
def test_device_batch_on_cuda_lands_every_batch_in_the_same_device_memory(static: bool):
    import numpy as np

    device_batch = v3.DeviceBatch(torch.device("cuda"), static=static)
    rng = np.random.default_rng(0)
    pointers = set()
    for _ in range(3):
        batch = dict(obs=rng.integers(0, 256, (8, 2, 3, 4, 4), dtype=np.uint8), reward=rng.random((8, 2), np.float32))
        tensors = device_batch(batch)
        pointers.add(tuple(t.data_ptr() for t in tensors.values()))
        assert all(t.is_cuda and torch.equal(t.cpu(), torch.from_numpy(batch[k])) for k, t in tensors.items())
    assert len(pointers) == 1
