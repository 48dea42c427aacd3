"""Seconds per gradient step of the official DreamerV2 (danijar/dreamerv2) at a preset's settings, on this CPU: the time
of its `Agent.train` (world model, imagination, actor and critic, the optimizer steps) on batches from a run's replay,
as `benchmarks/speed.py` times our `train_step`. Run through `dreamerv2_official.sh time PRESET EPISODES_DIR`, which
passes the preset's flags and runs it with the official code's virtualenv; the batches are drawn before the clock
starts, so the data pipeline is not timed (as speed.py does not time our replay).

    bash benchmarks/parity/dreamerv2_official.sh time cartpole_balance_reduced LOGDIR/train_episodes
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
    parser.add_argument("--src", required=True, help="the official code's dreamerv2/ folder (train.py, configs.yaml)")
    parser.add_argument("--episodes", required=True, help="a run's train_episodes/ (copied: the run's files are not touched)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first: the first two trace the graph")
    parser.add_argument("--timed-steps", type=int, default=20, help="timed gradient steps")
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
    if suite != "dmc":
        sys.exit(f"official_step_time.py: task {config.task}: only dmc_* presets are set up here")
    env = common.NormalizeAction(common.DMC(task, config.action_repeat, config.render_size, config.dmc_camera))

    with tempfile.TemporaryDirectory() as tmp:
        episodes = pathlib.Path(tmp) / "train_episodes"
        shutil.copytree(cli.episodes, episodes)
        replay = common.Replay(episodes, **config.replay)
        dataset = iter(replay.dataset(**config.dataset))
        batches = [next(dataset) for _ in range(cli.warmup_steps + cli.timed_steps)]
        agnt = agent.Agent(config, env.obs_space, env.act_space, common.Counter(replay.stats["total_steps"]))
        train = common.CarryOverState(agnt.train)
        times = []
        for i, batch in enumerate(batches):
            start = time.perf_counter()
            metrics = train(batch)
            float(metrics["model_loss"])  # wait for the step's results
            if i >= cli.warmup_steps:
                times.append(time.perf_counter() - start)
    print(f"official DreamerV2 {config.task}, batch {config.dataset.batch} x {config.dataset.length}, precision "
          f"{config.precision}, TensorFlow {tf.__version__}, OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS')}")  # fmt: skip
    print(f"seconds per gradient step: mean {np.mean(times):.3f}, median {np.median(times):.3f} "
          f"({cli.timed_steps} steps after {cli.warmup_steps} untimed)")  # fmt: skip


if __name__ == "__main__":
    main()
