#!/usr/bin/env bash
# Writing `dsl predict`'s output to an HDF5 data set from 1 to 4 processes: bench/predict_wide.net (16 MiB
# of output a sample for little computation), SAMPLES samples (64: a 1 GiB data set) a sample per mini-batch,
# its rows split over P processes (H=P) under mpirun. For each P, the median over RUNS runs of the command's
# seconds and of its writing's (the slowest process's time in the writes, which `dsl predict` reports; with
# collective writes that includes waiting in them for the other processes' tiles), and the same for a .npy
# output (every process pwrites its rows, then fsyncs them) for scale. BEFORE=DSL runs another build beside
# (one from before the collective writes, whose processes took turns, each opening the file for its block):
# its seconds, and its writing's where it reports them. Every HDF5 data set is checked to hold the bytes of
# the first .npy.
#
#   bench/predict_hdf5.sh                          # 64 samples, 3 runs each: about 5 minutes on 2 cores
#   SAMPLES=16 RUNS=1 PROCS="1 4" bench/predict_hdf5.sh
#   BEFORE=/tmp/dsl_before bench/predict_hdf5.sh   # an older build of dsl beside this one
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
BEFORE=${BEFORE:-}
NET=${NET:-bench/predict_wide.net}
SAMPLES=${SAMPLES:-64}
RUNS=${RUNS:-3}
PROCS=${PROCS:-1 2 3 4}
MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && MPIRUN+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/lib.sh

die() { echo "bench/predict_hdf5.sh: $*" >&2; exit 1; }
for f in "$DSL" $BEFORE; do [[ -x $f ]] || die "no $f; build first (cmake --build build --target dsl)"; done

echo "bench/predict_hdf5.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(nproc) cores;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg); $NET, $SAMPLES samples; median of $RUNS runs"
"$DSL" run "$NET" --steps 1 --batch 1 --save "$tmp/ck" >/dev/null

# predict DSL PROCS OUTPUT: the seconds of one prediction and of its writing ("-" where DSL does not say).
predict() {
    rm -f "${3%%:*}"  # a new file each time: a data set replaced in a file leaves the file's size as it was
    "${MPIRUN[@]}" -np "$2" "$1" predict "$NET" "$(sched "h$2" "$2" "H=$2" off)" --load "$tmp/ck" \
        --samples "$SAMPLES" --output "$3" >"$tmp/out" || { cat "$tmp/out" >&2; die "dsl predict failed"; }
    sed -n 's/.* in \([0-9.]*\) s (writing \([0-9.]*\) s).*/\1 \2/p; t; s/.* in \([0-9.]*\) s$/\1 -/p' "$tmp/out"
}

# medians DSL PROCS OUTPUT: "seconds writing", each the median of RUNS predictions.
medians() {
    local i
    for ((i = 0; i < RUNS; i++)); do predict "$@"; done >"$tmp/runs"
    local w=$(cut -d' ' -f2 "$tmp/runs")
    echo "$(cut -d' ' -f1 "$tmp/runs" | median) $([[ $w == -* ]] && echo - || echo "$w" | median)"
}

# digest FILE: the prediction's bytes, the file's last ones (after a .npy's header; a new HDF5 file's data set
# is contiguous and allocated last), as the last prediction's shape counts them.
digest() {
    local bytes=$(sed -n 's/.* \[\([0-9, ]*\)\] of layer.*/\1/p' "$tmp/out" | tr -d ' ' | tr ',' '*')
    tail -c "$(calc "$bytes * 4")" "$1" | sha256sum | cut -c1-16
}

printf '\n  %5s %10s %10s %10s %10s' procs "h5 s" "h5 write" "npy s" "npy write"
[[ -n $BEFORE ]] && printf ' %10s %10s' "before s" "bef. write"
printf ' %18s\n' "same bytes"
reference=
for p in $PROCS; do
    read -r h5 h5w <<<"$(medians "$DSL" "$p" "$tmp/p.h5:/pred")"
    got=$(digest "$tmp/p.h5")
    read -r npy npyw <<<"$(medians "$DSL" "$p" "$tmp/p.npy")"
    [[ -n $reference ]] || reference=$(digest "$tmp/p.npy")
    printf '  %5s %10s %10s %10s %10s' "$p" "$h5" "$h5w" "$npy" "$npyw"
    if [[ -n $BEFORE ]]; then
        read -r before beforew <<<"$(medians "$BEFORE" "$p" "$tmp/p.h5:/pred")"
        printf ' %10s %10s' "$before" "$beforew"
    fi
    printf ' %18s\n' "$([[ $got == "$reference" ]] && echo "yes ($got)" || echo "NO ($got)")"
done
echo "  (seconds: the whole command, and the slowest process's writing; same bytes: the HDF5 data set's against"
echo "   the .npy's of $(set -- $PROCS; echo "$1") process(es))"
