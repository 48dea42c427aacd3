"""A torchrun rank must leave no gloo thread behind when it exits: one left alive past destroy_process_group can abort
the interpreter's exit ("terminate called without an active exception", SIGABRT), and torchrun then reports a finished
run as failed (seen once in CI). The cause: torch._dynamo, imported for the first time while a process group exists (the
first torch.optim optimizer imports it), keeps the group alive. Every script imports it before it starts one."""

import socket
import subprocess
import sys

import pytest

from tests.helpers import ROOT, env_vars

# what a script does at the end of a torchrun run, in one process (world size 1 starts the same gloo threads)
END_OF_RUN = """
import glob, os, sys
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], WORLD_SIZE="1", RANK="0")
if sys.argv[1] != "none":
    __import__(sys.argv[1])  # the script's imports, as `python script.py` runs them
import torch, torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.Linear(3, 3)
opt = torch.optim.Adam(model.parameters(), fused=True)
dist.all_reduce(torch.ones(3))
dist.barrier()
dist.destroy_process_group()
print(sorted(open(f).read().strip() for f in glob.glob("/proc/self/task/*/comm")))
"""


def threads_after_destroy(module: str) -> str:
    with socket.socket() as s:  # a free port for the process group's store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-c", END_OF_RUN, module, str(port)], cwd=ROOT, env=env_vars(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("module", ["dreamer_v1_atari", "dreamer_v2_atari", "dreamer_v3_atari", "dreamer_v2_dmc"])
def test_no_gloo_thread_outlives_the_process_group(module):
    assert "gloo" not in threads_after_destroy(module)


def test_without_the_early_import_gloo_threads_outlive_the_process_group():
    """The negative control: with torch alone, the same end of run leaves gloo's threads running."""
    assert "pt_gloo_runloop" in threads_after_destroy("none")
