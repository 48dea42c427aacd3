"""The run plumbing (resume, checkpoints, torchrun, logging, --eval-model, the end-of-run checks) is one section, the
same text in every script, so that `diff` between two scripts shows the algorithm; and the main blocks keep no plumbing
of their own: no `global`, no function defined inside them."""

import ast
import difflib
import inspect
import re

import pytest

import dreamer_v1_atari as v1
import dreamer_v2_atari as v2
import dreamer_v2_dmc as v2_dmc
import dreamer_v3_atari as v3
from tests.helpers import ROOT

SCRIPTS = ["dreamer_v1_atari.py", "dreamer_v2_atari.py", "dreamer_v3_atari.py", "dreamer_v2_dmc.py"]
START, END = "# TRY NOT TO MODIFY: run plumbing.", '\nif __name__ == "__main__":'
# Lines of the section allowed to differ between scripts. None so far: what differs (the env checks, the model's name
# in the start-up line) lives in each script's own check_env / check_args / describe_model, which the section calls.
ALLOWED_TO_DIFFER: set = set()
# what the section calls in the script around it: each script must define these, with these parameters
SCRIPT_HOOKS = {"check_args": ["args"], "check_env": ["args"], "describe_model": ["args"], "fail": ["message"]}


def plumbing(script: str) -> str:
    text = (ROOT / script).read_text()
    assert text.count(START) == 1, f"{script}: the plumbing section's marker must appear once"
    return text[text.index(START) : text.index(END)]


def main_block(script: str) -> str:
    text = (ROOT / script).read_text()
    return text[text.index(END) + 1 :]


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


@pytest.mark.parametrize("num_envs, world_size", [(1, 1), (3, 2), (16, 1), (7, 4)])
def test_a_periodic_checkpoint_falls_once_in_every_checkpoint_interval(num_envs: int, world_size: int):
    """The policy step grows by num_envs x world_size per iteration; Run.checkpoint_due is true at exactly one iteration
    of every --checkpoint-every policy steps, the first one at or past each multiple; with 0, never."""
    from types import SimpleNamespace

    stride = num_envs * world_size
    steps = range(stride, 20_000 + stride, stride)  # to the first step at or past 20,000
    for every in (100, 250, 1000):
        run = SimpleNamespace(args=SimpleNamespace(checkpoint_every=every, num_envs=num_envs, world_size=world_size))
        due = [step for step in steps if v3.Run.checkpoint_due(run, step)]
        assert due == [next(s for s in steps if s >= k * every) for k in range(1, 20_000 // every + 1)], every
    run = SimpleNamespace(args=SimpleNamespace(checkpoint_every=0, num_envs=num_envs, world_size=world_size))
    assert not any(v3.Run.checkpoint_due(run, step) for step in steps)
