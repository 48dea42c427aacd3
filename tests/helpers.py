"""What the script tests share: which file is the script under test (the original, or a fork that an environment variable
names), running a dreamer script as a subprocess in a temporary directory (runs/ and videos/ land there, the repo root on
PYTHONPATH for `from ratio import Ratio` and `tests.catch_env`), reading its TensorBoard scalars and progress lines,
checking the one-line errors of bad input, stopping it with SIGTERM, and training it on Catch."""

import glob
import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
BANNER = ("A.L.E: ", "[Powered by Stella]")  # ale-py prints these when it loads a ROM
CUDA_WARNING = "warning: --cuda is set but CUDA is not available; running on the CPU"
# what --precision auto turns into on this machine's CPU (the rule itself is tested with mocked hardware in
# tests/test_precision.py): bf16 where the CPU has AVX512-BF16 or AMX, 32 elsewhere
AUTO_PRECISION = (
    "bf16 (auto: this CPU runs bf16 natively)"
    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    else "32 (auto: this CPU has no native bf16)"
)


# ---------------------------------------------------------------- the script under test: the original or a fork

SCRIPTS = {  # the names the tests use for the four scripts, and the original files
    "v1": "dreamer_v1_atari.py",
    "v2": "dreamer_v2_atari.py",
    "v3": "dreamer_v3_atari.py",
    "v2-dmc": "dreamer_v2_dmc.py",
}


def fork_variable(name: str) -> str:
    """The environment variable that points the tests of script `name` at a fork: DREAMER_V1, DREAMER_V2, DREAMER_V3,
    DREAMER_V2_DMC."""
    return "DREAMER_" + name.upper().replace("-", "_")


def script_path(name: str) -> Path:
    """The file that the unit, run and identical-maths tests of script `name` ("v1", "v2", "v3" or "v2-dmc") test: the
    original in the repo root, or the file that its environment variable names (a path relative to the repo root, or an
    absolute one), e.g. `DREAMER_V3=dreamer_v3_blockgru.py pytest tests/test_dreamer_v3_units.py`."""
    variable, value = fork_variable(name), os.environ.get(fork_variable(name), "")
    if not value:
        return ROOT / SCRIPTS[name]
    path = ROOT / Path(value).expanduser()  # an absolute path stays as it is
    if not (path.is_file() and path.suffix == ".py"):
        raise FileNotFoundError(f"{variable}={value}: no such .py file ({path}); give a path relative to the repo root "
                                "or an absolute one")  # fmt: skip
    return path.resolve()


def load_script(name: str):
    """The module of script_path(name), imported under its own name (the file's stem: `dreamer_v3_atari`, or
    `dreamer_v3_blockgru` for a fork) and cached in sys.modules, so that every test file and `import dreamer_v3_atari`
    share one module. A fork outside the repo root has its folder put on sys.path, as `python path/to/fork.py` would, so
    that its module can be found again by name (by pickle, or in a spawned subprocess)."""
    path = script_path(name)
    module = sys.modules.get(path.stem)
    if module is not None:
        if Path(module.__file__).resolve() != path.resolve():
            raise ImportError(f"{fork_variable(name)}: cannot test {path}: a module named {path.stem} is already loaded "
                              f"from {module.__file__}; give the fork another file name")  # fmt: skip
        return module
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # before running it: its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[path.stem]
        raise
    return module


# ---------------------------------------------------------------- running a script


def env_vars(**extra: str) -> dict:
    # One OpenMP thread per process: the networks are tiny, and on 2 shared cores several processes whose OpenMP threads
    # spin against each other run 5-10x slower.
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1", **extra)


def command(script: str | Path, flags: str, launcher: tuple = ()) -> list:
    return [sys.executable, *launcher, str(ROOT / script), *flags.split()]  # an absolute path stays as it is


def run(script: str | Path, flags: str, cwd: Path, launcher: tuple = (), timeout: int = 600) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        command(script, flags, launcher), cwd=cwd, env=env_vars(), capture_output=True, text=True, timeout=timeout
    )


def assert_ok(result: subprocess.CompletedProcess):
    assert result.returncode == 0, f"{' '.join(result.args)}\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert "Traceback" not in result.stderr


def only_run_dir(cwd: Path) -> Path:
    dirs = glob.glob(str(cwd / "runs" / "*"))
    assert len(dirs) == 1, dirs
    return Path(dirs[0])


def tensorboard(run_dir: Path) -> tuple:
    """({scalar tag: [values]}, [image tags]) of every event file in run_dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 1})
    ea.Reload()
    return {tag: [e.value for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}, ea.Tags()["images"]


def progress_ratio(stdout: str) -> float:
    return float(re.findall(r"\| replay ratio ([0-9.]+) \|", stdout)[-1])


def assert_within_5_percent(realised: float, target: float):
    assert abs(realised - target) <= 0.05 * target, (realised, target)


def error_lines(result: subprocess.CompletedProcess) -> list:
    return [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(BANNER)]


def selected_cases(request, test_name: str) -> list:
    """The `case` parameters of `test_name` in the requesting test's module that this session runs: every case, unless
    -k or node ids chose some. A module fixture that starts one subprocess per case starts only these."""
    items = request.session.items
    return [item.callspec.params["case"] for item in items if item.module is request.module and item.originalname == test_name]


def assert_one_error_line(script: str | Path, result: subprocess.CompletedProcess, cwd: Path, *needles: str) -> str:
    """Non-zero exit, no traceback, exactly one line on stderr that contains every needle, no runs/ directory."""
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output, output
    lines = error_lines(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{Path(script).name}: error: "), lines[0]  # the script names itself by its file name
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (cwd / "runs").exists(), "a failed start must not create runs/"
    print(lines[0])
    return lines[0]


def run_until_training_then_sigterm(
    script: str | Path, flags: str, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Start the script, wait for a progress line with gradient steps > 0, send SIGTERM, and collect the rest."""
    proc = subprocess.Popen(command(script, flags), cwd=cwd, env=env_vars(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)], daemon=True)
    reader.start()
    stdout, deadline = [], time.time() + timeout
    try:
        while True:
            line = lines.get(timeout=max(deadline - time.time(), 0.1))
            assert line is not None, "the run ended before training started:\n" + "".join(stdout) + proc.stderr.read()
            stdout.append(line)
            if re.search(r"\| gradient steps [1-9]\d* \|", line):
                proc.send_signal(signal.SIGTERM)
                break
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    while (line := lines.get_nowait() if not lines.empty() else None) is not None:
        stdout.append(line)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(stdout), proc.stderr.read())


# ---------------------------------------------------------------- the learning tests on Catch

CATCH = "tests.catch_env:Catch-v0"


def random_policy_mean(episodes: int = 2000, seed: int = 0, env_id: str = CATCH) -> float:
    """Mean return of uniformly random actions on env_id (Catch: about -0.59). gym.make imports the module named before
    the colon, which registers the game."""
    env, rng, returns = gym.make(env_id), np.random.default_rng(seed), []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def train_catch(script: str, flags: str, cwd: Path, seed: int = 1, env_id: str = CATCH, cuda: bool = False) -> dict:
    """Run the script on env_id (Catch unless told) in cwd, on the CPU (on the GPU with cuda=True, as
    benchmarks/gpu_figures.sh does); returns the training returns, the final evaluation's mean and the wall time."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    start = time.time()
    result = run(script, f"--env-id {env_id} --seed {seed} {'--cuda' if cuda else '--no-cuda'} {flags}", cwd, timeout=900)
    wall = time.time() - start
    assert_ok(result)
    ea = EventAccumulator(str(only_run_dir(cwd)), size_guidance={"scalars": 0})
    ea.Reload()
    train = [e.value for e in ea.Scalars("charts/episodic_return")]
    evals = [e.value for e in ea.Scalars("eval/episodic_return")]
    return dict(train=train, eval=evals[-1], wall=wall, stdout=result.stdout)
