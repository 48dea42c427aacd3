#!/usr/bin/env bash
# Peer baseline: sheeprl 0.8.4's Dreamer on Atari (Pong), CPU, replay_ratio 1 (1 gradient step per policy step).
# Installs sheeprl into its own venv, runs one short measured run and prints seconds per gradient step (median).
# The peer figures of docs/speed.md and the pages' speed sections come from this script.
# Usage: bash benchmarks/run_sheeprl.sh            (defaults below; override with env vars)
#   ALGO=v3|v2|v1 (v3: exp=dreamer_v3_100k_ms_pacman, size $SIZE, 16 x 64; v2: exp=dreamer_v2, 16 x 50;
#   v1: exp=dreamer_v1, 50 x 50)   SIZE=S|XS|M|L|XL (v3 only)   N_GRAD=12 (gradient steps to time)
#   VENV=${PEERS_DIR:-${TMPDIR:-/tmp}/peers}/sheeprl-venv   SKIP_INSTALL=1 reuses an existing $VENV
#   PRECISION=32-true|bf16-mixed (fabric.precision)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${VENV:-${PEERS_DIR:-${TMPDIR:-/tmp}/peers}/sheeprl-venv}"
SIZE="${SIZE:-S}"          # S = the size of sheeprl's Atari-100k experiment (exp=dreamer_v3_100k_ms_pacman)
N_GRAD="${N_GRAD:-12}"
ALGO="${ALGO:-v3}"
case "$ALGO" in
  v3) EXP="exp=dreamer_v3_100k_ms_pacman algo=dreamer_v3_${SIZE}"; SEQ="${SEQ:-64}"; BATCH="${BATCH:-16}" ;;
  v2) EXP="exp=dreamer_v2"; SEQ="${SEQ:-50}"; BATCH="${BATCH:-16}" ;;
  v1) EXP="exp=dreamer_v1"; SEQ="${SEQ:-50}"; BATCH="${BATCH:-50}" ;;
  *) echo "ALGO must be v3, v2 or v1" >&2; exit 2 ;;
esac
GAME="${GAME:-PongNoFrameskip-v4}"
PY="${PYTHON:-python3.11}"
WORK="${WORK:-${PEERS_DIR:-${TMPDIR:-/tmp}/peers}/run_sheeprl_work}"
mkdir -p "$WORK"

if [ "${SKIP_INSTALL:-0}" != "1" ]; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  # torch first, the version our scripts were timed with (on a machine without a GPU, pick the CPU build, e.g. with
  # --index-url https://download.pytorch.org/whl/cpu); sheeprl 0.8.4 only needs torch>=2.6
  "$VENV/bin/pip" install -q torch==2.13.0
  # sheeprl 0.8.4 + Atari extra (ale-py 0.12.x ships the ROMs; gymnasium 1.x)
  "$VENV/bin/pip" install -q "sheeprl[atari]==0.8.4"
fi
"$VENV/bin/python" -c "import torch, sheeprl, gymnasium, ale_py; print('torch', torch.__version__, 'sheeprl', sheeprl.__version__, 'gymnasium', gymnasium.__version__, 'ale_py', ale_py.__version__, 'threads', torch.get_num_threads())"

# The timing wrapper: runs the sheeprl CLI unchanged, with perf_counter timers around every call of the
# per-gradient-step `train(...)` (world model + actor + critic update) and every collection step.
cat > "$WORK/sheeprl_timed.py" <<'PYEOF'
"""Run the sheeprl CLI (same Hydra overrides as `sheeprl ...`) with per-call timers patched into the
training loop of dreamer_v1/v2/v3: every call of `train(...)` (one gradient step: world model + actor + critic)
and every policy step of the collection (`Time/env_interaction_time` phase: player forward + env.step + rb.add)
is timed with time.perf_counter. Prints medians at the end. Usage: python sheeprl_timed.py exp=dreamer_v3 ..."""
import contextlib, importlib, json, os, statistics, sys, time

algo = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("exp=")), "dreamer_v3")
algo = {"dreamer_v3": "dreamer_v3", "dreamer_v2": "dreamer_v2", "dreamer_v1": "dreamer_v1"}.get(algo, algo.split("_100k")[0])
mod = importlib.import_module(f"sheeprl.algos.{algo}.{algo}")
import torch

STATS = {"train": [], "env": [], "params": None, "threads": None}
_orig_train = mod.train

def timed_train(*args, **kwargs):
    if STATS["params"] is None:
        mods = [a for a in args if isinstance(a, torch.nn.Module)]
        names = ["world_model", "actor", "critic", "target_critic"]
        STATS["params"] = {n: sum(p.numel() for p in m.parameters()) for n, m in zip(names, mods)}
        STATS["threads"] = torch.get_num_threads()
    t = time.perf_counter()
    out = _orig_train(*args, **kwargs)
    STATS["train"].append(time.perf_counter() - t)
    return out

mod.train = timed_train

# dreamer_v3 only: time its two halves (train() calls them by their module-level names)
for _fn in ("world_model_learning", "behaviour_learning"):
    if hasattr(mod, _fn):
        STATS[_fn] = []
        def _wrap(f, key):
            def g(*a, **k):
                t = time.perf_counter(); r = f(*a, **k); STATS[key].append(time.perf_counter() - t); return r
            return g
        setattr(mod, _fn, _wrap(getattr(mod, _fn), _fn))
_orig_phase = mod.phase_timer

@contextlib.contextmanager
def timed_phase(name):
    t = time.perf_counter()
    with _orig_phase(name):
        yield
    if name == "Time/env_interaction_time":
        STATS["env"].append(time.perf_counter() - t)

mod.phase_timer = timed_phase

def report():
    tr, env = STATS["train"], STATS["env"]
    res = {"algo": algo, "argv": sys.argv[1:], "threads": STATS["threads"], "params": STATS["params"],
           "n_grad_steps": len(tr), "n_policy_steps": len(env)}
    if tr:
        skip = tr[3:] if len(tr) > 6 else tr  # skip warm-up steps
        res.update(sec_per_grad_step_median=statistics.median(skip), sec_per_grad_step_mean=statistics.mean(skip),
                   sec_per_grad_step_p10=sorted(skip)[len(skip) // 10], sec_per_grad_step_p90=sorted(skip)[(9 * len(skip)) // 10],
                   first_grad_step_s=tr[0])
    if env:
        # the last len(tr) policy steps ran the learned policy when replay_ratio=1 (random-action ones came first)
        pol = env[-len(tr):] if tr and len(tr) < len(env) else env
        rnd = env[: len(env) - len(pol)]
        res.update(policy_steps_per_s_policy_phase_median=1 / statistics.median(pol),
                   policy_steps_per_s_policy_phase_mean=len(pol) / sum(pol),
                   policy_steps_per_s_random_phase_median=(1 / statistics.median(rnd)) if rnd else None,
                   policy_steps_per_s_random_phase_mean=(len(rnd) / sum(rnd)) if rnd else None)
    for _fn in ("world_model_learning", "behaviour_learning"):
        if STATS.get(_fn):
            v = STATS[_fn][3:] if len(STATS[_fn]) > 6 else STATS[_fn]
            res[f"sec_{_fn}_median"] = statistics.median(v)
            res[f"raw_{_fn}_s"] = [round(x, 4) for x in STATS[_fn]]
    res["raw_train_s"] = [round(x, 4) for x in tr]
    res["raw_policy_phase_env_s"] = [round(x, 4) for x in env[len(env) - len(tr):]] if tr else []
    print("TIMED_RESULT " + json.dumps(res), flush=True)
    out = os.environ.get("TIMED_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(res) + "\n")

import sheeprl.cli as cli
try:
    sys.argv[0] = "sheeprl"
    cli.run()
finally:
    report()
PYEOF

cd "$WORK"
# Training starts after max(learning_starts, seq_len) policy steps (every env must hold one sequence);
# replay_ratio=1 and num_envs=1 then give exactly 1 gradient step per policy step.
TOTAL=$(( SEQ + N_GRAD ))
rm -f "$WORK/result.jsonl"
TIMED_OUT="$WORK/result.jsonl" "$VENV/bin/python" sheeprl_timed.py \
  $EXP env.id=$GAME env.num_envs=1 \
  fabric.accelerator=cpu fabric.devices=1 fabric.precision=${PRECISION:-32-true} \
  algo.replay_ratio=1 algo.learning_starts=$SEQ algo.per_rank_pretrain_steps=0 \
  algo.per_rank_batch_size=$BATCH algo.per_rank_sequence_length=$SEQ algo.total_steps=$TOTAL \
  buffer.size=100000 buffer.checkpoint=False checkpoint.every=1000000 checkpoint.save_last=False \
  env.capture_video=False algo.run_test=False metric.log_every=8 log_root="$WORK/logs" > "$WORK/run.log" 2>&1 \
  || { tail -40 "$WORK/run.log"; exit 1; }
"$VENV/bin/python" - "$WORK/result.jsonl" <<'PYEOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
p = r["params"]
print(f"{r['algo']} {r['argv'][0]} {r['argv'][1]} threads={r['threads']} params: world_model={p['world_model']:,} actor={p['actor']:,} critic={p['critic']:,}")
print(f"gradient steps timed: {r['n_grad_steps']} (first one {r['first_grad_step_s']:.2f} s, excluded with the next 2)")
print(f"policy steps/s while training (player forward + env.step + buffer add): median {r['policy_steps_per_s_policy_phase_median']:.1f}, mean {r['policy_steps_per_s_policy_phase_mean']:.1f}")
if "sec_world_model_learning_median" in r:
    print(f"  of which world model update (median) {r['sec_world_model_learning_median']:.3f} s, actor+critic (imagination) {r['sec_behaviour_learning_median']:.3f} s")
print(f"SECONDS PER GRADIENT STEP (median): {r['sec_per_grad_step_median']:.3f}  (mean {r['sec_per_grad_step_mean']:.3f}, p10 {r['sec_per_grad_step_p10']:.3f}, p90 {r['sec_per_grad_step_p90']:.3f})")
PYEOF
