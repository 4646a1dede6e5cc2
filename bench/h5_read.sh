#!/usr/bin/env bash
# Reading HDF5 data sets a tile per process: a SIZE x SIZE x 18-channel float32 data set of SAMPLES samples
# (2048, 64: 19 GB), chunked one sample per chunk, made once in CACHE; each process's read throughput of its
# tile (with a halo margin of 1) through dsl's data source (bench_h5_read) under 1 process and 4 split
# H=2 x W=2, against h5py reading the same hyperslabs in as many processes at once; and the share of a
# training step of NET (stdlib/mesh2k.net, one sample per step) that reading its tile would take, the step's
# time being `dsl explain`'s prediction on PLATFORM (this 2-core machine's figures) (STEP_MS overrides it with a measured one).
#
#   bench/h5_read.sh                        # 64 samples: 19 GB in $CACHE, needs as much free disk
#   SAMPLES=4 bench/h5_read.sh              # a few minutes on 2 cores
#
# The file is read back right after it is written, so much of it may come from the page cache: the figures
# are those of the library's reading and conversion path on a warm cache unless the file exceeds memory.
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
READER=${READER:-build/bench/bench_h5_read}
PY=/usr/bin/python3
SIZE=${SIZE:-2048}
SAMPLES=${SAMPLES:-64}
CACHE=${CACHE:-/tmp/dsl_h5_bench}
NET=${NET:-stdlib/mesh2k.net}
# The figures of 'local' for the step's prediction: this 2-core machine's, as the tests fix them.
PLATFORM=${PLATFORM:-tests/fixtures/local_epyc_2core.platform}
MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && MPIRUN+=(--allow-run-as-root)

for f in "$DSL" "$READER"; do
    [[ -x $f ]] || { echo "bench/h5_read.sh: no $f; build first (cmake --build build)" >&2; exit 1; }
done
$PY -c 'import h5py' 2>/dev/null || { echo "bench/h5_read.sh: /usr/bin/python3 has no h5py" >&2; exit 1; }

echo "bench/h5_read.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(nproc) cores;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$CACHE"
file=$CACHE/mesh_${SIZE}_${SAMPLES}.h5
if [[ ! -f $file ]]; then
    echo "writing $file ($SAMPLES x 18 x $SIZE x $SIZE float32, a chunk per sample)"
    $PY - "$file" "$SIZE" "$SAMPLES" <<'PY'
import sys, h5py, numpy as np
path, size, samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path + ".part", "w") as f:
    x = f.create_dataset("x", (samples, 18, size, size), "f4", chunks=(1, 18, size, size))
    rng = np.random.default_rng(0)
    for s in range(samples):
        x[s] = rng.standard_normal((18, size, size), dtype=np.float32)
    f.create_dataset("y", data=(rng.random((samples, size // 64, size // 64)) < 0.5).astype("u1"))
import os; os.rename(path + ".part", path)
PY
fi

# h5py reading the same hyperslabs as bench_h5_read, in ROWS x COLS processes at once: MB/s of each.
h5py_read() {
    local rows=$1 cols=$2 pids=() r c
    for ((r = 0; r < rows; r++)); do
        for ((c = 0; c < cols; c++)); do
            $PY - "$file" "$rows" "$cols" "$r" "$c" >"$CACHE/h5py_$r$c.out" <<'PY' &
import sys, time, h5py, numpy as np
path, rows, cols, r, c = sys.argv[1], *map(int, sys.argv[2:])
with h5py.File(path, "r") as f:
    x = f["x"]
    S, C, H, W = x.shape
    part = lambda n, k, p: (max(0, n * p // k - 1), min(n, n * (p + 1) // k + 1))
    (y0, y1), (x0, x1) = part(H, rows, r), part(W, cols, c)
    out = np.empty((C, y1 - y0, x1 - x0), np.float32)
    t = time.perf_counter()
    for s in range(S):
        x.read_direct(out, np.s_[s, :, y0:y1, x0:x1])
    t = time.perf_counter() - t
print(f"{out.nbytes * S / t / 1e6:.0f} {t / S:.4f}")
PY
            pids+=($!)
        done
    done
    wait "${pids[@]}"
    cat "$CACHE"/h5py_*.out | awk '{mb = mb (NR > 1 ? " " : "") $1; if ($2 > s) s = $2} END {print mb ";", s, "s per sample (slowest)"}'
    rm -f "$CACHE"/h5py_*.out
}

echo
for split in "1 1" "2 2"; do
    set -- $split
    "${MPIRUN[@]}" -np $(($1 * $2)) "$READER" "$NET" "$file" "$1" "$2"
    echo "h5py $1x$2: MB/s per process: $(h5py_read "$1" "$2")"
done

# The share of a step: reading one sample's tile (the slowest process's seconds per sample under 4) against
# the step's time under the same split.
echo
if [[ -n ${STEP_MS:-} ]]; then
    step_ms=$STEP_MS
    echo "step of $NET: $step_ms ms (STEP_MS)"
else
    printf 'procs = 4\nbatch = 1\ndefault H=2 W=2 overlap=on\n' >"$CACHE/hw4.sched"
    step_ms=$(DSL_LOCAL_PLATFORM=$PLATFORM "$DSL" explain "$NET" "$CACHE/hw4.sched" --batch 1 2>/dev/null |
        sed -n 's/^step *\([0-9.]*\) ms predicted.*/\1/p')
    echo "step of $NET under H=2 W=2, batch 1: ${step_ms:-?} ms (dsl explain, platform $PLATFORM)"
fi
read_s=$("${MPIRUN[@]}" -np 4 "$READER" "$NET" "$file" 2 2 | sed -n 's/.*; \([0-9.]*\) s per sample.*/\1/p')
[[ -n $step_ms && -n $read_s ]] &&
    echo "reading a sample's tile: $read_s s, $(awk "BEGIN { printf \"%.2f\", 100 * $read_s * 1000 / $step_ms }")% of the step"
