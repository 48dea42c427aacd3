#!/usr/bin/env bash
# Copies the parity runs' logs into benchmarks/curves/parity/ so that they are committed as the runs go:
# the official runs' metrics.jsonl and config.yaml (their TensorBoard files hold videos, megabytes, and are left out),
# and our runs' event files (scalars only). Checkpoints, variables.pkl and episodes stay where the runs are.
#
#   bash benchmarks/parity/collect.sh OFFICIAL_LOGDIRS_PARENT OUR_RUNS_DIR
#   e.g. bash benchmarks/parity/collect.sh /root/parity/runs /root/parity/ours/runs
set -euo pipefail
official="$1" ours="$2"
dest="$(dirname "$0")/../curves/parity"
mkdir -p "$dest"
for d in "$official"/official_*/; do
    name=$(basename "$d")
    mkdir -p "$dest/$name"
    cp "$d/metrics.jsonl" "$d/config.yaml" "$dest/$name/"
done
for d in "$ours"/*/; do
    name=$(basename "$d")
    mkdir -p "$dest/$name"
    cp "$d"/events.out.tfevents.* "$dest/$name/"
done
ls -R "$dest"
