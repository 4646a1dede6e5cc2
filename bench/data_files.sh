#!/usr/bin/env bash
# Data as users hold it, in files: the figures of issue 49.
#
#   read    each process's read throughput of its tile (a half of the depth with a margin of 1, on 2
#           processes; the whole sample on 1) from a folder of FILES one-sample HDF5 files of 128^3 x 4 int16
#           (LBANN's CosmoFlow layout, 16 MiB each), through dsl's data source as float32, as stored and with
#           --transform log1p (bench_data_read), against h5py reading the same hyperslabs as int16 in as many
#           processes at once.
#   step    the share of a training step that reading from those files costs: dsl run of
#           bench/cosmoflow_128.net at batch 2 on its files (with log1p), and of bench/mesh_stack_512.net at
#           batch 1 on a folder of one-sample .npy files, against synthetic data, reading ahead (--prefetch 2)
#           and not (0); the median of each run's steps after its first two, the runs alternated over ROUNDS
#           rounds. Where this user may, the page cache is dropped before each run that reads files (as root:
#           /proc/sys/vm/drop_caches), so they come from the disk.
#   many    a folder of MANY small files (one [1, 8, 8] float32 sample each): the time to the first step
#           (`dsl run --steps 1`, start to end) and the peak memory, against the same samples in one file; the
#           difference is what listing the files costs.
#
#   bench/data_files.sh                  # all three; FILES=1024 needs 16 GiB free in CACHE
#   FILES=64 STEPS=12 bench/data_files.sh read step
#   MANY=100000 bench/data_files.sh many
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
READER=${READER:-build/bench/bench_data_read}
PY=/usr/bin/python3
FILES=${FILES:-1024}
MANY=${MANY:-100000}
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-3}
CACHE=${CACHE:-/tmp/dsl_data_bench}
MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && MPIRUN+=(--allow-run-as-root)
parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(read step many)

for f in "$DSL" "$READER"; do
    [[ -x $f ]] || { echo "bench/data_files.sh: no $f; build first (cmake --build build)" >&2; exit 1; }
done
$PY -c 'import h5py, numpy' 2>/dev/null || { echo "bench/data_files.sh: /usr/bin/python3 lacks h5py or numpy" >&2; exit 1; }
echo "bench/data_files.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(nproc) cores;" \
    "$(free -g | awk '/Mem:/ {print $2 " GiB, " $7 " GiB available"}'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$CACHE"

# Drops the page cache where this user may; says whether it did.
drop_cache() {
    sync
    if (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then echo "(page cache dropped)"; else echo "(page cache kept: not allowed here)"; fi
}

boxes=$CACHE/boxes128_$FILES
make_boxes() {
    [[ -d $boxes ]] && return
    echo "writing $FILES files of 4 x 128^3 int16 into $boxes"
    $PY - "$boxes" "$FILES" <<'PY'
import os, sys, h5py, numpy as np
folder, files = sys.argv[1], int(sys.argv[2])
os.makedirs(folder + ".part")
rng = np.random.default_rng(0)
for i in range(files):
    with h5py.File(f"{folder}.part/b{i:05d}.h5", "w") as f:
        f["full"] = rng.poisson(20, size=(4, 128, 128, 128)).astype(np.int16)
        f["unitPar"] = rng.uniform(-1, 1, size=4).astype(np.float32)
os.rename(folder + ".part", folder)
PY
}

# h5py reading the same hyperslabs as bench_data_read on `procs` processes at once: MB/s of each.
h5py_read() {
    local procs=$1 pids=() p
    for ((p = 0; p < procs; p++)); do
        $PY - "$boxes" "$procs" "$p" >"$CACHE/h5py_$p.out" <<'PY' &
import glob, sys, time, h5py, numpy as np
folder, procs, p = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = sorted(glob.glob(folder + "/*.h5"))
D = 128
lo, hi = max(0, D * p // procs - 1), min(D, D * (p + 1) // procs + 1)
out = np.empty((4, hi - lo, 128, 128), np.int16)
t = time.perf_counter()
for name in files:
    with h5py.File(name, "r") as f:
        f["full"].read_direct(out, np.s_[:, lo:hi, :, :])
t = time.perf_counter() - t
print(f"{out.nbytes * len(files) / t / 1e6:.0f} {t / len(files):.4f}")
PY
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$CACHE"/h5py_*.out | awk '{mb = mb (NR > 1 ? " " : "") $1; if ($2 > s) s = $2} END {print mb ";", s, "s per sample (slowest)"}'
    rm -f "$CACHE"/h5py_*.out
}

# The median seconds of a run's steps after its first two, from its --log.
median_step() {
    $PY -c 'import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if "\"loss\"" in l][2:]
print(f"{statistics.median(s):.4f}" if s else "?")' "$1"
}

for part in "${parts[@]}"; do
    case $part in
    read)
        make_boxes
        echo
        echo "read: $FILES one-sample HDF5 files, 4 x 128^3 int16, --transform log1p"
        for procs in 1 2; do
            for transform in - log1p; do
                echo "  $(drop_cache) --transform: $transform"
                "${MPIRUN[@]}" -np $procs "$READER" bench/cosmoflow_128.net "$boxes/*.h5:/full" "$boxes/*.h5:/unitPar" 2 \
                    $transform | sed 's/^/  /'
            done
            echo "  $(drop_cache)"
            echo "  h5py, $procs process(es), int16 as stored: MB/s per process: $(h5py_read $procs)"
        done
        ;;
    step)
        make_boxes
        mesh=$CACHE/mesh512_$STEPS
        if [[ ! -d $mesh ]]; then
            echo "writing $((STEPS + 2)) one-sample .npy pairs of 18 x 512^2 float32 into $mesh"
            $PY - "$mesh" $((STEPS + 2)) <<'PY'
import os, sys, numpy as np
folder, n = sys.argv[1], int(sys.argv[2])
for d in ("x", "y"):
    os.makedirs(f"{folder}.part/{d}")
rng = np.random.default_rng(0)
for i in range(n):
    np.save(f"{folder}.part/x/s{i:05d}.npy", rng.standard_normal((18, 512, 512), dtype=np.float32))
    np.save(f"{folder}.part/y/s{i:05d}.npy", rng.integers(0, 2, size=(16, 16)).astype(np.uint8))
os.rename(folder + ".part", folder)
PY
        fi
        echo
        echo "step: the median of each run's steps after its first two ($STEPS steps), runs alternated, $ROUNDS rounds"
        run() {  # NAME NET BATCH ARGS...: prints the run's median step
            local name=$1 net=$2 batch=$3
            shift 3
            "$DSL" run "$net" --batch "$batch" --steps "$STEPS" --log "$CACHE/$name.jsonl" "$@" >/dev/null 2>&1
            median_step "$CACHE/$name.jsonl"
        }
        for net in cosmoflow_128 mesh_stack_512; do
            if [[ $net == cosmoflow_128 ]]; then
                batch=2 files=(--data "x=$boxes/*.h5:/full" --data "y=$boxes/*.h5:/unitPar" --transform x=log1p)
            else
                batch=1 files=(--data "x=$mesh/x" --data "y=$mesh/y")
            fi
            synthetic=() ahead=() asked=()
            for ((r = 0; r < ROUNDS; r++)); do
                synthetic+=("$(run synthetic "bench/$net.net" $batch)")
                drop_cache >/dev/null
                ahead+=("$(run ahead "bench/$net.net" $batch "${files[@]}")")
                drop_cache >/dev/null
                asked+=("$(run asked "bench/$net.net" $batch "${files[@]}" --prefetch 0)")
            done
            $PY - "$net" "${synthetic[*]}" "${ahead[*]}" "${asked[*]}" "$(drop_cache)" <<'PY'
import statistics, sys
net, runs, note = sys.argv[1], [list(map(float, a.split())) for a in sys.argv[2:5]], sys.argv[5]
s, a, q = (statistics.median(r) for r in runs)
print(f"  {net}: synthetic {s:.4f} s per step {runs[0]}; files {note}, --prefetch 2: {a:.4f} s {runs[1]}, "
      f"{100 * (a / s - 1):+.1f}%; --prefetch 0: {q:.4f} s {runs[2]}, {100 * (q / s - 1):+.1f}%")
PY
        done
        ;;
    many)
        many=$CACHE/many_$MANY
        if [[ ! -d $many ]]; then
            echo "writing $MANY files of [1, 8, 8] float32 into $many"
            $PY - "$many" "$MANY" <<'PY'
import os, sys, numpy as np
folder, n = sys.argv[1], int(sys.argv[2])
os.makedirs(folder + ".part/x")
rng = np.random.default_rng(0)
x = rng.standard_normal((n, 1, 8, 8), dtype=np.float32)
for i in range(n):
    np.save(f"{folder}.part/x/s{i:06d}.npy", x[i])
np.save(folder + ".part/joined_x.npy", x)
np.save(folder + ".part/y.npy", rng.integers(0, 2, size=n).astype(np.int32))
os.rename(folder + ".part", folder)
PY
        fi
        cat >"$CACHE/small.net" <<'NET'
input x [N, 1, 8, 8]
label y [N]
c = conv(4, kernel = 3, pad = 1)
p = global_avgpool
f = fc(2)
loss = softmax_cross_entropy from f, y
NET
        echo
        echo "many: $MANY files of one [1, 8, 8] sample each, dsl run --steps 1 (start to end; peak memory)"
        for form in "one file:x=$many/joined_x.npy" "a folder of $MANY files:x=$many/x"; do
            /usr/bin/time -f "%e %M" -o "$CACHE/time.out" "$DSL" run "$CACHE/small.net" --steps 1 --batch 4 \
                --data "${form#*:}" --data "y=$many/y.npy" >/dev/null 2>&1
            read -r seconds kib <"$CACHE/time.out"
            echo "  ${form%%:*}: $seconds s, peak $((kib / 1024)) MiB"
        done
        ;;
    *)
        echo "bench/data_files.sh: no part '$part' (read, step, many)" >&2
        exit 2
        ;;
    esac
done
