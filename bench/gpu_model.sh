#!/usr/bin/env bash
# The performance model on the GPU: calibrates this machine's GPU (`dsl calibrate --device gpu`, into a
# copy of stdlib/platforms/dgx_h100.platform whose settings it starts from), then for each network compares,
# layer by layer, what the model predicts (`dsl explain --json`) with what training measures (`dsl run
# --profile`, the mean of the steps after the first), and the whole step. Needs a dsl built with the GPU
# backend, a GPU, and python3 (for the JSON).
#
#   bench/gpu_model.sh                          # bench/mesh_stack_512.net at batch 4 on 1 GPU
#   BATCH=8 bench/gpu_model.sh stdlib/mesh1k.net
#   PLATFORM=my_gpu.platform bench/gpu_model.sh   # a platform calibrated before: no calibration
#   DEVICE=cpu BASE=local bench/gpu_model.sh       # the same comparison on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
BATCH=${BATCH:-4}
STEPS=${STEPS:-8}
DEVICE=${DEVICE:-gpu}
BASE=${BASE:-dgx_h100}
nets=("$@")
((${#nets[@]})) || nets=(bench/mesh_stack_512.net)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[[ -x $DSL ]] || { echo "bench/gpu_model.sh: no $DSL; build first" >&2; exit 1; }
platform=${PLATFORM:-}
if [[ -z $platform ]]; then
    platform=$tmp/gpu.platform
    for net in "${nets[@]}"; do
        echo "calibrating the $DEVICE for $net at batch $BATCH..."
        "$DSL" calibrate "$net" --device "$DEVICE" --platform "$BASE" --procs 1 --batch "$BATCH" -o "$platform" \
            >/dev/null 2>"$tmp/calibrate.err" || { cat "$tmp/calibrate.err" >&2; exit 1; }
    done
fi

for net in "${nets[@]}"; do
    printf 'procs = 1\nbatch = %s\ndefault N=1 overlap=off\n' "$BATCH" >"$tmp/one.sched"
    "$DSL" explain "$net" "$tmp/one.sched" --platform "$platform" --json >"$tmp/explain.json"
    "$DSL" run "$net" --device "$DEVICE" --batch "$BATCH" --steps "$STEPS" --profile >"$tmp/profile.txt"
    # The step unprofiled: profiling waits for the device at every layer.
    "$DSL" run "$net" --device "$DEVICE" --batch "$BATCH" --steps "$STEPS" --log "$tmp/log.jsonl" >/dev/null
    python3 - "$net" "$tmp/explain.json" "$tmp/profile.txt" "$tmp/log.jsonl" <<'PY'
import json, re, statistics, sys

net, explain, profile, log = sys.argv[1:]
predicted = {l["name"]: l for l in json.load(open(explain))["layers"]}
measured = {}
for line in open(profile):
    m = re.match(r"(\S+)\s+\S+\s+([-0-9.]+)\s+[-0-9.]+\s+([-0-9.]+)\s+[-0-9.]+\s*$", line)
    if m and m.group(1) in predicted:
        measured[m.group(1)] = (float(m.group(2)), float(m.group(3)))
steps = [json.loads(l)["seconds"] for l in open(log) if l.strip()][2:]
step_predicted = json.load(open(explain))["seconds"]["step"]
print(f"\n== {net}: per layer, ms per step (the model from calibration, and as measured in training)")
print(f"  {'layer':<24} {'kind':<20} {'fwd model':>10} {'fwd meas':>10} {'bwd model':>10} {'bwd meas':>10}")
errors = []
for name, l in predicted.items():
    if name not in measured or l["kind"] in ("input", "label"):
        continue
    s = l["seconds"]
    fwd, bwd = s["forward"] * 1e3, (s["backward_data"] + s["backward_weights"]) * 1e3
    mf, mb = measured[name]
    print(f"  {name:<24} {l['kind']:<20} {fwd:>10.3f} {mf:>10.3f} {bwd:>10.3f} {mb:>10.3f}")
    if l["kind"] == "conv" and mf + mb > 0:
        errors.append(abs(fwd + bwd - mf - mb) / (mf + mb))
if errors:
    print(f"  convolutions: median |error| {100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}%")
if steps:
    m = statistics.median(steps)
    print(f"  step: model {step_predicted * 1e3:.2f} ms, measured {m * 1e3:.2f} ms "
          f"(median of steps 3-{len(steps) + 2}), error {100 * (step_predicted - m) / m:+.1f}%")
PY
done
