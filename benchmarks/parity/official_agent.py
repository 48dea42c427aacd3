"""The official DreamerV2 (danijar/dreamerv2) agent at a preset's settings, through its own API, for two measurements
that its train.py does not make. Run through `dreamerv2_official.sh`, which passes the preset's flags and uses the
official code's virtualenv:

    # seconds per gradient step of its Agent.train (world model, imagination, actor, critic and the optimizer steps) on
    # batches of a run's replay, drawn before the clock starts, as benchmarks/speed.py times our train_step
    bash benchmarks/parity/dreamerv2_official.sh time cartpole_balance_reduced LOGDIR
    # the return of N evaluation episodes of a run's saved weights (LOGDIR/variables.pkl), with the policy its
    # evaluations use (mode='eval': the actor's mode), as our --eval-model does for a checkpoint
    bash benchmarks/parity/dreamerv2_official.sh eval cartpole_balance_reduced LOGDIR --eval-episodes 10
    bash benchmarks/parity/dreamerv2_official.sh eval kfm_v2_reduced LOGDIR --eval-episodes 10

LOGDIR is an official run's logdir; nothing in it is changed (its train_episodes/ are copied to a temporary folder).
"""

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("mode", choices=["time", "eval"])
    parser.add_argument("--src", required=True, help="the official code's dreamerv2/ folder (train.py, configs.yaml)")
    parser.add_argument("--run", required=True, help="an official run's logdir (train_episodes/, variables.pkl)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="time: untimed steps first (the first two trace)")
    parser.add_argument("--timed-steps", type=int, default=20, help="time: timed gradient steps")
    parser.add_argument("--eval-episodes", type=int, default=10, help="eval: episodes to play")
    cli, official_flags = parser.parse_known_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path[:0] = [cli.src, str(pathlib.Path(cli.src).parent)]
    import agent
    import common
    import numpy as np
    import ruamel.yaml as yaml
    import tensorflow as tf

    # the config as the official train.py builds it: defaults, then --configs, then the other flags
    configs = yaml.safe_load((pathlib.Path(cli.src) / "configs.yaml").read_text())
    parsed, remaining = common.Flags(configs=["defaults"]).parse(official_flags, known_only=True)
    config = common.Config(configs["defaults"])
    for name in parsed.configs:
        config = config.update(configs[name])
    config = common.Flags(config).parse(remaining)
    tf.config.experimental_run_functions_eagerly(not config.jit)
    suite, task = config.task.split("_", 1)
    # as train.py's make_env: the DMC env and NormalizeAction, or the Atari env (as `setup` patched it for gym 0.26) and
    # OneHotAction; then TimeLimit (DMC: 0, none, the task's own 1,000 steps; Atari: 27,000 policy steps)
    if suite == "dmc":
        env = common.NormalizeAction(common.DMC(task, config.action_repeat, config.render_size, config.dmc_camera))
    elif suite == "atari":
        env = common.Atari(task, config.action_repeat, config.render_size, config.atari_grayscale)
        env = common.OneHotAction(env)
    else:
        sys.exit(f"official_agent.py: task {config.task}: only the dmc_* and atari_* presets are set up here")
    env = common.TimeLimit(env, config.time_limit)
    print(f"official DreamerV2 {config.task}, batch {config.dataset.batch} x {config.dataset.length}, precision "
          f"{config.precision}, TensorFlow {tf.__version__}, OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS')}")  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        episodes = pathlib.Path(tmp) / "train_episodes"
        shutil.copytree(pathlib.Path(cli.run) / "train_episodes", episodes)
        replay = common.Replay(episodes, **config.replay)
        dataset = iter(replay.dataset(**config.dataset))
        step = common.Counter(replay.stats["total_steps"])
        agnt = agent.Agent(config, env.obs_space, env.act_space, step)
        train = common.CarryOverState(agnt.train)
        if cli.mode == "time":
            batches = [next(dataset) for _ in range(cli.warmup_steps + cli.timed_steps)]
            times = []
            for i, batch in enumerate(batches):
                start = time.perf_counter()
                metrics = train(batch)
                float(metrics["model_loss"])  # wait for the step's results
                if i >= cli.warmup_steps:
                    times.append(time.perf_counter() - start)
            print(f"seconds per gradient step: mean {np.mean(times):.3f}, median {np.median(times):.3f}, min "
                  f"{np.min(times):.3f} ({cli.timed_steps} steps after {cli.warmup_steps} untimed)")  # fmt: skip
            return
        train(next(dataset))  # builds the variables, as train.py does before it loads variables.pkl
        agnt.load(pathlib.Path(cli.run) / "variables.pkl")
        returns = []
        driver = common.Driver([env])
        driver.on_episode(lambda ep: returns.append(float(ep["reward"].astype(np.float64).sum())))
        driver(lambda *a: agnt.policy(*a, mode="eval"), episodes=cli.eval_episodes)
        print(f"{cli.run}: {int(step)} policy steps in its replay, "
              f"{len(returns)} evaluation episodes: " + " ".join(f"{r:.1f}" for r in returns))  # fmt: skip
        print(f"mean {np.mean(returns):.1f}, std {np.std(returns):.1f}, min {np.min(returns):.1f}, max {np.max(returns):.1f}")


if __name__ == "__main__":
    main()
