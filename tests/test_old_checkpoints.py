"""A checkpoint written before the run plumbing moved into its own section still resumes and still plays
with --eval-model: the checkpoint format did not change. The fixtures, and how they were made: tests/fixtures/. The
resumed run also hides what a killed run logged after its checkpoint."""

import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT, assert_ok, error_lines, run, tensorboard

SMALL = (
    "--learning-starts 128 --batch-size 2 --batch-length 8 --deter-size 8 --hidden-size 8 --cnn-depth 2 --mlp-units 8 "
    "--stoch-size 2 --log-every 100 --replay-ratio 0.25 --no-cuda --exp-name old_format"
)
SCRIPTS = {  # fixture folder: (script, the flags it was written with besides SMALL)
    "v1": ("dreamer_v1_atari.py", "--reward-layers 1 --discount-layers 1 --actor-layers 1 --critic-layers 1 --pretrain 1 "
                                  "--imagination-horizon 5"),  # fmt: skip
    "v2": ("dreamer_v2_atari.py", "--mlp-layers 1 --classes 2 --imagination-horizon 5"),
    "v3": ("dreamer_v3_atari.py", "--mlp-layers 1 --classes 2"),
    "dmc": ("dreamer_v2_dmc.py", "--env-id cartpole-balance --action-repeat 8 --pretrain 1 --mlp-layers 1 --classes 2 "
                                 "--imagination-horizon 5"),  # fmt: skip
}
FIXTURES = ROOT / "tests" / "fixtures" / "old_checkpoints"


def log_of_a_killed_run(run_dir: Path):
    """What a run killed after its step-200 checkpoint leaves in the log: charts/SPS of -1 at steps 100 to 350, in an event
    file older than any the resumed run writes."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(run_dir / "killed")
    for step in range(100, 400, 50):
        writer.add_scalar("charts/SPS", -1.0, step)
    writer.close()
    (event_file,) = (run_dir / "killed").glob("events.out.tfevents.*")
    event_file.rename(run_dir / "events.out.tfevents.1000000000.killed.0")
    (run_dir / "killed").rmdir()


def old_checkpoint(name: str, tmp_path: Path) -> tuple:
    """Copy the fixture to runs/<its run name>/checkpoint.pt under tmp_path: (that path, the checkpoint)."""
    checkpoint = torch.load(FIXTURES / name / "checkpoint.pt", weights_only=False)
    path = tmp_path / "runs" / checkpoint["run_name"] / "checkpoint.pt"
    path.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / name / "checkpoint.pt", path)
    return path, checkpoint


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_old_checkpoint_resumes(name: str, tmp_path: Path):
    script, flags = SCRIPTS[name]
    path, old = old_checkpoint(name, tmp_path)
    log_of_a_killed_run(path.parent)
    result = run(script, f"{SMALL} {flags} --eval-episodes 0 --total-timesteps 400 --resume {path}", tmp_path)
    assert_ok(result)
    scalars, _ = tensorboard(path.parent)
    # the killed run's points up to the checkpoint's step stay, those after it are replaced by the resumed run's
    assert scalars["charts/SPS"][:3] == [-1.0] * 3 and min(scalars["charts/SPS"][3:]) > 0, scalars["charts/SPS"]
    assert f"resumed {old['run_name']} at policy step 200, 19 gradient steps" in result.stdout
    assert "step 400/400 (100%)" in result.stdout
    new = torch.load(path, weights_only=False)  # over the old one; without a buffer the replay refills, then trains
    assert new["global_step"] == 400 and new["gradient_steps"] > old["gradient_steps"]
    assert sorted(new) == sorted(old)  # the same keys: the format did not change
    for key in ("wm", "actor", "critic"):
        assert sorted(new[key]) == sorted(old[key])


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_old_checkpoint_plays_with_eval_model(name: str, tmp_path: Path):
    script, _ = SCRIPTS[name]
    path, old = old_checkpoint(name, tmp_path)
    result = run(script, f"--eval-model {path} --eval-episodes 1 --no-cuda", tmp_path)
    assert_ok(result)
    assert f"eval of {path} (policy step 200) on {old['args']['env_id']}: mean return" in result.stdout


def fork_with_a_new_flag(script: str, folder: Path) -> Path:
    """A copy of the script under its own name in `folder` (a checkpoint names the script it belongs to), with one new
    flag, `--gru-blocks` (default 1), added to Args and RESUME_FLAGS as docs/forking.md's checklist says."""
    text = (ROOT / script).read_text()
    anchor = "    # World model\n"
    assert text.count(anchor) == 1 and text.count("RESUME_FLAGS = (") == 1
    flag = '    gru_blocks: int = 1\n    """blocks of the block-diagonal GRU (1: the plain GRU)"""\n'
    text = text.replace(anchor, anchor + flag)
    text = text.replace("RESUME_FLAGS = (", 'RESUME_FLAGS = ("gru_blocks", ')
    folder.mkdir()
    (folder / script).write_text(text)
    return folder / script


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_old_checkpoint_resumes_in_a_fork_with_a_new_flag(name: str, tmp_path: Path):
    """A checkpoint written before a flag existed resumes with the flag's default and says so in one line; asking for
    another value is the usual one-line refusal, naming the flag (before: a KeyError traceback)."""
    script, flags = SCRIPTS[name]
    fork = fork_with_a_new_flag(script, tmp_path / "fork")
    path, old = old_checkpoint(name, tmp_path)
    other = run(str(fork), f"{SMALL} {flags} --gru-blocks 8 --eval-episodes 0 --total-timesteps 400 --resume {path}", tmp_path)
    assert other.returncode != 0 and "Traceback" not in other.stderr, other.stderr
    assert error_lines(other) == [
        f"{script}: error: --resume {path}: the checkpoint was trained with --gru-blocks 1 (its default: the checkpoint "
        "predates the flag) (this run has 8); pass the same values"
    ]
    result = run(str(fork), f"{SMALL} {flags} --eval-episodes 0 --total-timesteps 400 --resume {path}", tmp_path)
    assert_ok(result)
    assert "--resume: the checkpoint predates --gru-blocks; it resumes with the default 1" in result.stdout
    assert f"resumed {old['run_name']} at policy step 200, 19 gradient steps" in result.stdout
    assert torch.load(path, weights_only=False)["args"]["gru_blocks"] == 1  # the new checkpoint knows the flag
