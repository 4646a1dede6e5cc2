#!/usr/bin/env bash
# Channel and filter splits on this machine: bench/wide_512.net (512 channels at 32x32) on 2 processes under
# N=2, H=2, F=2 and C=2, each predicted beside measured (`dsl compare --measure`), and the schedule the
# auto-scheduler writes for 2 processes. Run it on an idle machine: the first run measures this machine.
#
#   bench/channels.sh                       # mini-batch 2, 10 steps (the first 2 not counted)
#   BATCH=4 STEPS=6 bench/channels.sh
#   bench/channels.sh samples/resnet_tiny.net
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
STEPS=${STEPS:-10}
BATCH=${BATCH:-2}
net=${1:-bench/wide_512.net}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[[ -x $DSL ]] || { echo "bench/channels.sh: no $DSL; build first (scripts/setup)" >&2; exit 1; }

scheds=()
for split in "N=2" "H=2 overlap=on" "F=2" "C=2"; do
    name=$(tr -d ' =' <<< "${split%% overlap*}")
    printf 'procs = 2\nbatch = %s\n\ndefault %s\n' "$BATCH" "$split" > "$tmp/$name.sched"
    scheds+=("$tmp/$name.sched")
done
echo "== $net on 2 processes, batch $BATCH: predicted and measured"
"$DSL" compare "$net" "${scheds[@]}" --measure --steps "$STEPS"
echo
echo "== the auto-scheduler's schedule for 2 processes"
"$DSL" schedule "$net" --procs 2 --batch "$BATCH" | grep -v '^#'
