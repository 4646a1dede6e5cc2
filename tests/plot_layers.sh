#!/bin/sh
# bench/plot_layers.py end to end: a run's trace and the model's (2 processes, rows split) give a chart and
# one merged trace with the run's processes and the model's track. Usage: tests/plot_layers.sh DSL
set -eu
dsl=$1
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || {
    echo 'skipped: bench/plot_layers.py needs /usr/bin/python3 with matplotlib (python3-matplotlib: scripts/test installs it)'
    exit 77
}
cd "$(dirname "$0")/.."
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
export NO_COLOR=1 DSL_LOCAL_PLATFORM="$PWD/tests/fixtures/local_epyc_2core.platform"
"$dsl" run samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --steps 3 --trace "$d/run.json" >/dev/null
"$dsl" explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --trace "$d/predicted.json" >/dev/null
"$dsl" compare samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched samples/mesh_tiny_spatial_h_2.sched \
    --measure --steps 3 --json >"$d/compare.json" 2>/dev/null
/usr/bin/python3 bench/plot_layers.py --trace "$d/run.json" --predicted "$d/predicted.json" -o "$d/layers.png" \
    --merge "$d/both.json"
/usr/bin/python3 bench/plot_layers.py --compare "$d/compare.json" -o "$d/compare.png"
/usr/bin/python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
for png in ("layers.png", "compare.png"):
    with open(f"{d}/{png}", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
t = json.load(open(f"{d}/both.json"))
names = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e.get("name") == "process_name"}
assert names == {0: "rank 0", 1: "rank 1", 2: "predicted: the busiest of 2 processes"}, names
assert any(e.get("name") == "block1.1.conv forward" and e["pid"] == 2 for e in t["traceEvents"])
print("plot_layers: charts and merged trace made")
PY
