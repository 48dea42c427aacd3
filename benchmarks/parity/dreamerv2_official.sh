#!/usr/bin/env bash
# Runs the official DreamerV2 (danijar/dreamerv2, TensorFlow, last commit 07d906e) at the settings of one of our
# commands, so that its curve can be drawn beside ours (docs/parity.md).
#
#   bash benchmarks/parity/dreamerv2_official.sh setup
#   bash benchmarks/parity/dreamerv2_official.sh run PRESET SEED LOGDIR [more official flags, e.g. --steps 3e4]
#   bash benchmarks/parity/dreamerv2_official.sh time PRESET LOGDIR   # seconds per gradient step (measure alone)
#   bash benchmarks/parity/dreamerv2_official.sh eval PRESET LOGDIR [--eval-episodes N]   # its saved weights' returns
#
# PRESET is one of ours, spelled as its `--exp-name` in docs/results.md (docs/parity.md maps every one of our flags to
# its config key):
#   cartpole_balance_reduced   dreamer_v2_dmc.py, cartpole-balance from pixels, the reduced model (2.27M parameters)
#   cartpole_balance_paper     dreamer_v2_dmc.py, cartpole-balance from pixels, the paper's size (15.6M parameters):
#                              the official dmc_vision config unchanged but for the run length and the evaluations
#   kfm_v2_reduced             dreamer_v2_atari.py, Atari Kung Fu Master, the reduced model (5.27M parameters), 100k
#                              frames (our command: docs/parity.md)
#
# Nothing of the official code enters this repository: `setup` clones it (DREAMERV2_GIT, default its GitHub address;
# a local clone or mirror works too) into PARITY_HOME (default ~/.cache/dreamer-parity), checks out 07d906e, makes
# the few compatibility edits below as scripted substitutions, and builds a virtualenv there with the versions that
# run it on a current Linux (TensorFlow 2.15 CPU; see the pins). Its Atari env was written for the gym of 2021
# (`gym.envs.atari.AtariEnv` on atari-py, the old four-value step); the edits below run it on gym 0.26 with ale-py
# 0.8.1's AtariEnv and gym's own AtariPreprocessing, with the same settings, and copy the ROMs from the ale-py wheel
# of our side (ale-py 0.8.1 ships none). The run is CPU-only, one thread, fp32 (`--precision 32`: its float16 needs a
# GPU). It resumes from LOGDIR when LOGDIR holds a run already (variables.pkl and the episodes it wrote); its curve is
# LOGDIR/metrics.jsonl, read by benchmarks/plot_curves.py --official-run "LABEL=GLOB".
# TensorFlow uses its oneDNN kernels by default only on CPUs with AVX512-VNNI, AVX512-BF16 or AMX; elsewhere its own
# kernels are much slower (the paper-size step on a Zen 3 EPYC, family 25 model 1, one thread, alone: 31.8 s without,
# 13.4 s with), so run, time and eval turn them on everywhere (TF_ENABLE_ONEDNN_OPTS=1 unless set).
set -euo pipefail

COMMIT=07d906e
PARITY_HOME="${PARITY_HOME:-$HOME/.cache/dreamer-parity}"
SRC="$PARITY_HOME/dreamerv2"
VENV="$PARITY_HOME/venv"
PYTHON="${PYTHON:-python3.11}"

setup() {
    mkdir -p "$PARITY_HOME"
    if [ ! -d "$SRC/.git" ]; then
        git clone --quiet --no-checkout "${DREAMERV2_GIT:-https://github.com/danijar/dreamerv2}" "$SRC"
    fi
    # Only the code (the score files are large and unused here), as committed: this also undoes earlier edits.
    git -C "$SRC" checkout --quiet "$COMMIT" -- dreamerv2
    # Compatibility edits for NumPy 1.24+, TensorFlow 2.11+ and a CPU, each a one-token substitution or one line:
    # np.bool was removed from NumPy (the plain bool is the same dtype);
    sed -i 's/np\.bool\b/bool/g' "$SRC/dreamerv2/common/envs.py" "$SRC/dreamerv2/common/replay.py"
    # the mixed-precision API left `experimental` in TF 2.4 (set_policy became set_global_policy);
    sed -i 's/from tensorflow.keras.mixed_precision import experimental as prec/from tensorflow.keras import mixed_precision as prec/' \
        "$SRC/dreamerv2/common/nets.py" "$SRC/dreamerv2/train.py"
    sed -i 's/prec\.set_policy(/prec.set_global_policy(/' "$SRC/dreamerv2/train.py"
    # the optimizers it builds with `tf.optimizers.X(lr, epsilon=eps)` are the legacy Keras ones since TF 2.11;
    sed -i 's/tf\.optimizers\./tf.keras.optimizers.legacy./' "$SRC/dreamerv2/common/tfutils.py"
    # it asserts a GPU before anything else (its own message: "To actually train on CPU remove this assert").
    sed -i "s/^  assert tf.config.experimental.list_physical_devices('GPU'), message$/  pass  # CPU run: GPU assert removed/" \
        "$SRC/dreamerv2/train.py"
    # Resuming (no training effect): it saves its weights (not the optimizers' moments) only after each eval_every
    # stretch of training, while the episodes it collects are on disk at once, so a run stopped between two saves
    # resumes with weights up to eval_every policy steps older than its replay, and those gradient steps are lost. It
    # also saves them at every log (log_every policy steps), after the log is written.
    sed -i "s/^      logger.write(fps=True)$/      logger.write(fps=True)\n      agnt.save(logdir \/ 'variables.pkl')  # parity: resumable at every log/" \
        "$SRC/dreamerv2/train.py"
    # Its save holds the weights only, so every resume restarted Adam from zero moments, where ours resumes them.
    # variables.pkl now holds, after the weights' pickle (which is all its own load reads), a second pickle with each
    # optimizer's variables (step count and moments) by optimizer name; load restores them where they are present and
    # match in name and shape (train.py loads after one training step has built them), and says so either way.
    "$PYTHON" - "$SRC/dreamerv2/common/tfutils.py" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
save_old = "      pickle.dump(values, f)\n"
save_new = save_old + "      pickle.dump(_optimizer_state(self), f)  # parity: the optimizers' moments\n"
load_old = "      values = pickle.load(f)\n"
load_new = load_old + "      try:  # parity: the optimizers' moments, where the file has them\n" \
    "        optimizers = pickle.load(f)\n      except EOFError:\n        optimizers = None\n"
assign = "    tf.nest.map_structure(lambda x, y: x.assign(y), self.variables, values)\n"
assign_new = assign + "    _load_optimizer_state(self, optimizers)  # parity\n"
helpers = '''

def _optimizer_state(module):  # parity: each optimizer's variables by its name
  return {m._name: [(v.name, v.numpy()) for v in m.variables]
          for m in module.submodules if isinstance(m, Optimizer)}


def _load_optimizer_state(module, saved):  # parity
  if saved is None:
    print('No optimizer state in the checkpoint: the optimizers start from zero moments.')
    return
  current = {m._name: m for m in module.submodules if isinstance(m, Optimizer)}
  for name, entries in saved.items():
    variables = current[name].variables
    if [(v.name, tuple(v.shape)) for v in variables] != [(n, x.shape) for n, x in entries]:
      raise ValueError(f'the {name} optimizer state in the checkpoint does not match this agent')
    for v, (_, x) in zip(variables, entries):
      v.assign(x)
  count = sum(len(entries) for entries in saved.values())
  print(f'Load optimizer state with {count} tensors ({", ".join(saved)}).')
'''
for old, new in ((save_old, save_new), (load_old, load_new), (assign, assign_new)):
    assert text.count(old) == 1, old
    text = text.replace(old, new)
open(path, "w").write(text + helpers)
PY
    # Atari (class Atari only): gym 0.26 has no gym.envs.atari; ale-py 0.8.1's AtariEnv is the same env on the newer
    # ALE (same arguments: frameskip 1 inside gym's AtariPreprocessing, sticky actions 0.25, minimal action set), except
    # that its RGB screen is spelled 'rgb' (atari-py's 'image') and its RAM is read from its ALE (no _get_ram); gym
    # 0.26's EnvSpec (the spec that tells AtariPreprocessing the inner env does not skip frames) wants an entry point;
    local atari='/^class Atari:/,/^class Crafter:/'
    sed -i -e "$atari s/^    import gym\.envs\.atari$/    import ale_py.env.gym/" \
        -e "$atari s/gym\.envs\.atari\.AtariEnv(/ale_py.env.gym.AtariEnv(/" \
        -e "$atari s/obs_type='image'/obs_type='rgb'/" \
        -e "$atari s/self\._env\.env\._get_ram()/self._env.env.ale.getRAM()/" \
        -e "$atari s/EnvSpec('NoFrameskip-v0')/EnvSpec('NoFrameskip-v0', entry_point=None)/" \
        "$SRC/dreamerv2/common/envs.py"
    # gym 0.26's step returns (obs, reward, terminated, truncated, info) and its reset (obs, info). The inner env has
    # no frame limit (ALE's max_num_frames_per_episode stays 0), so it never truncates and `done` is the game over, as
    # before; the 27,000-step limit is the official TimeLimit wrapper's, as before.
    sed -i -e "$atari s/^    image, reward, done, info = self\._env\.step(/    image, reward, done, _, info = self._env.step(/" \
        -e "$atari s/^      image = self\._env\.reset()$/      image, _ = self._env.reset()/" \
        "$SRC/dreamerv2/common/envs.py"
    git -C "$SRC" diff --stat
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    # Pins: Keras 3 (TF 2.16+) breaks it; tfp 0.23 matches TF 2.15; ruamel.yaml 0.18 removed the safe_load it calls;
    # gym 0.21 no longer builds; mujoco 4 breaks dm_control 1.0.50; ale-py 0.8.1 is the last ale-py on gym (0.9 moved
    # to gymnasium); opencv is what gym's AtariPreprocessing resizes with (cv2.INTER_AREA, as the gym of 2021);
    # opencv 4.11+ wants NumPy 2.
    "$VENV/bin/pip" install --quiet tensorflow-cpu==2.15.1 tensorflow-probability==0.23.0 "numpy==1.26.4" \
        ruamel.yaml==0.17.40 gym==0.26.2 dm_control==1.0.50 "mujoco>=3,<4" rich ale-py==0.8.1 \
        opencv-python-headless==4.10.0.84
    # The Atari ROMs: ale-py 0.8.1 ships none (its ROMs came from a separate download that needs more than PyPI);
    # ale-py 0.9+ wheels carry them. Take the .bin files of ale-py 0.12.1 (the version of our side, so both play the
    # same ROM) into ale-py 0.8.1's own ROM folder, where it looks first and checks each against its list of MD5s.
    local roms
    roms=$("$VENV/bin/python" -c "import ale_py.roms, os; print(os.path.dirname(ale_py.roms.__file__))")
    if [ ! -f "$roms/kung_fu_master.bin" ]; then
        "$VENV/bin/pip" download --quiet --no-deps --only-binary=:all: --python-version 3.11 ale-py==0.12.1 \
            -d "$PARITY_HOME/wheels"
        "$VENV/bin/python" - "$roms" "$PARITY_HOME"/wheels/ale_py-0.12.1-*.whl <<'PY'
import os, sys, zipfile
roms, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("ale_py/roms/") and n.endswith(".bin")]
    for name in names:
        with open(os.path.join(roms, os.path.basename(name)), "wb") as f:
            f.write(z.read(name))
print(f"{len(names)} ROMs copied into {roms}")
PY
    fi
    "$VENV/bin/python" -c "import tensorflow as tf, tensorflow_probability, dm_control.suite; print('tf', tf.__version__)"
    "$VENV/bin/python" -c "import ale_py.roms; print('ROM', ale_py.roms.KungFuMaster)"
}

preset_flags() {
    case "$1" in
        cartpole_balance_reduced)
            # dreamer_v2_dmc.py --env-id cartpole-balance --total-timesteps 50000 --cnn-depth 16 --mlp-units 200
            #   --mlp-layers 2 --stoch-size 16 --classes 16 --precision 32 --eval-every 5000 --eval-episodes 1
            echo --configs dmc_vision --task dmc_cartpole_balance --precision 32 --steps 5e4 \
                --eval_every 5e3 --eval_eps 1 --log_every 500 \
                --encoder.cnn_depth 16 --decoder.cnn_depth 16 \
                --rssm.deter 200 --rssm.hidden 200 --rssm.stoch 16 --rssm.discrete 16 \
                --reward_head.layers 2 --reward_head.units 200 --discount_head.layers 2 --discount_head.units 200 \
                --actor.layers 2 --actor.units 200 --critic.layers 2 --critic.units 200
            ;;
        cartpole_balance_paper)
            # dreamer_v2_dmc.py --env-id cartpole-balance --total-timesteps 50000 --eval-every 5000 --eval-episodes 5
            #   (the script's defaults are the paper's size: CNN depth 48, heads 4 x 400, 32 x 32 latents, deter 200)
            echo --configs dmc_vision --task dmc_cartpole_balance --precision 32 --steps 5e4 \
                --eval_every 5e3 --eval_eps 5 --log_every 500
            ;;
        kfm_v2_reduced)
            # dreamer_v2_atari.py --env-id ALE/KungFuMaster-v5 --total-timesteps 25000 --learning-starts 1024
            #   --deter-size 256 --hidden-size 256 --cnn-depth 16 --mlp-units 256 --precision 32 --eval-every 2500
            #   --eval-episodes 1 (everything else, the heads' 4 layers and the 32 x 32 latents included, is the
            #   paper's Atari config on both sides)
            echo --configs atari --task atari_kung_fu_master --precision 32 --steps 2.5e4 --prefill 1024 \
                --eval_every 2500 --eval_eps 1 --log_every 1000 \
                --encoder.cnn_depth 16 --decoder.cnn_depth 16 --rssm.deter 256 --rssm.hidden 256 \
                --reward_head.units 256 --discount_head.units 256 --actor.units 256 --critic.units 256
            ;;
        *)
            echo "dreamerv2_official.sh: unknown preset '$1'; use cartpole_balance_reduced, cartpole_balance_paper or kfm_v2_reduced" >&2
            exit 2
            ;;
    esac
}

case "${1:-}" in
    setup)
        setup
        ;;
    run)
        [ $# -ge 4 ] || { echo "usage: $0 run PRESET SEED LOGDIR [flags]" >&2; exit 2; }
        preset="$2" seed="$3" logdir="$4"
        shift 4
        [ -x "$VENV/bin/python" ] || { echo "dreamerv2_official.sh: run '$0 setup' first" >&2; exit 2; }
        flags=$(preset_flags "$preset")
        export MUJOCO_GL="${MUJOCO_GL:-egl}" OMP_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1
        export TF_ENABLE_ONEDNN_OPTS="${TF_ENABLE_ONEDNN_OPTS:-1}"  # see the top of this file
        # shellcheck disable=SC2086  # the preset's flags are words
        exec "$VENV/bin/python" "$SRC/dreamerv2/train.py" --logdir "$logdir" --seed "$seed" $flags "$@"
        ;;
    time | eval)
        # official_agent.py: seconds per gradient step of its Agent.train (time; measure alone), or the returns of
        # evaluation episodes of LOGDIR/variables.pkl (eval)
        [ $# -ge 3 ] || { echo "usage: $0 $1 PRESET LOGDIR [flags]" >&2; exit 2; }
        mode="$1" preset="$2" logdir="$3"
        shift 3
        [ -x "$VENV/bin/python" ] || { echo "dreamerv2_official.sh: run '$0 setup' first" >&2; exit 2; }
        flags=$(preset_flags "$preset")
        export MUJOCO_GL="${MUJOCO_GL:-egl}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
        export TF_NUM_INTRAOP_THREADS="${TF_NUM_INTRAOP_THREADS:-$OMP_NUM_THREADS}" TF_NUM_INTEROP_THREADS=1
        export TF_ENABLE_ONEDNN_OPTS="${TF_ENABLE_ONEDNN_OPTS:-1}"
        # shellcheck disable=SC2086  # the preset's flags are words
        exec "$VENV/bin/python" "$(dirname "$0")/official_agent.py" "$mode" --src "$SRC/dreamerv2" --run "$logdir" \
            $flags "$@"
        ;;
    *)
        echo "usage: $0 setup | run PRESET SEED LOGDIR [flags] | time PRESET LOGDIR | eval PRESET LOGDIR" >&2
        exit 2
        ;;
esac
