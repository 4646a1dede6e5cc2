#!/usr/bin/env bash
# Distributed training on this machine: strong scaling of one 512x512 sample over 2 processes (one core
# each) against one process on one core, overlap on against off, halo traffic per step; the same 2
# processes against one process of two threads; peak memory per process under a 4-way spatial split
# against one process; then a 2048x2048 sample that does not train on one process under a per-process
# memory limit and does when split 4 ways.
#
#   bench/scaling.sh                   # all (~3 min on 2 cores; the 1-process 2048x2048 run needs ~16 GiB)
#   STEPS=8 bench/scaling.sh scaling   # only the timing part; `threads`, `memory` and `limit` are the others
#   ROUNDS=9 bench/scaling.sh threads  # 2 processes of 1 thread against 1 process of 2 threads, alternating
#   DSL=build/cli/dsl LIMIT_GIB=5 bench/scaling.sh limit
#
# Step times are medians over the steps after the first two (warm-up: primitive creation, first touch).
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
STEPS=${STEPS:-7}
ROUNDS=${ROUNDS:-5}
LIMIT_GIB=${LIMIT_GIB:-7}  # mesh2k: one sample needs ~16 GiB on one process, ~4.5 GiB (model) on each of four
parts=${1:-all}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[[ -x $DSL ]] || { echo "bench/scaling.sh: no $DSL; build first (scripts/test or cmake --build build)" >&2; exit 1; }

source bench/lib.sh

echo "bench/scaling.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(nproc) cores;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $parts == all || $parts == scaling ]]; then
    net=bench/mesh_stack_512.net
    echo
    echo "== strong scaling: $net, one sample (512x512), $STEPS steps, median of the last $((STEPS - 2))"
    printf '  %-34s %10s %8s %14s %14s\n' "run" "ms/step" "speedup" "halo MB/step" "peak MiB/proc"
    OMP_NUM_THREADS=1 taskset -c 0 "$DSL" run "$net" --batch 1 --steps "$STEPS" --log "$tmp/one.jsonl" >"$tmp/one.out"
    base=$(field "$tmp/one.jsonl" seconds | median)
    printf '  %-34s %10.1f %8s %14s %14s\n' "1 process, 1 core" "$(calc "$base * 1000")" "1.00" "-" \
        "$(peak "$tmp/one.out")"
    for run in "H=2 off" "H=2 on" "W=2 off" "W=2 on"; do
        read -r split overlap <<<"$run"
        s=$(sched "s_${split}_$overlap" 2 "$split" "$overlap")
        # dsl starts the 2 processes itself: one thread each, each bound to its core.
        "$DSL" run "$net" "$s" --steps "$STEPS" --log "$tmp/two.jsonl" >"$tmp/two.out"
        t=$(field "$tmp/two.jsonl" seconds | median)
        bytes=$(field "$tmp/two.jsonl" halo_bytes | median)
        printf '  %-34s %10.1f %8.2f %14.2f %14s\n' "2 processes, $split, overlap $overlap" \
            "$(calc "$t * 1000")" "$(calc "$base / $t")" "$(calc "$bytes / 1000000")" \
            "$(peak "$tmp/two.out")"
    done
    echo "  target: speedup >= 1.8 (2 is the limit)"
fi

if [[ $parts == all || $parts == threads ]]; then
    # The other way to use two cores on one sample: one process of two threads. Runs alternate, so that
    # the machine's drift reaches both alike; the ratio of each round and their median.
    net=bench/mesh_stack_512.net
    s=$(sched t2 2 "H=2" on)
    echo
    echo "== $net, one sample: 2 processes of 1 thread (H=2, overlap on) against 1 process of 2 threads," \
        "$ROUNDS rounds of $STEPS steps"
    printf '  %-8s %18s %18s %8s
' "round" "1 x 2 threads ms" "2 x 1 thread ms" "ratio"
    ratios=()
    for round in $(seq "$ROUNDS"); do
        OMP_NUM_THREADS=2 "$DSL" run "$net" --batch 1 --steps "$STEPS" --log "$tmp/t.jsonl" >/dev/null
        "$DSL" run "$net" "$s" --steps "$STEPS" --log "$tmp/p.jsonl" >/dev/null
        t=$(field "$tmp/t.jsonl" seconds | median)
        p=$(field "$tmp/p.jsonl" seconds | median)
        ratios+=("$(calc "$p / $t")")
        printf '  %-8s %18.1f %18.1f %8.3f\n' "$round" "$(calc "$t * 1000")" "$(calc "$p * 1000")" "${ratios[-1]}"
    done
    echo "  median ratio $(printf '%s\n' "${ratios[@]}" | median); target: <= 1.0"
fi

if [[ $parts == all || $parts == memory ]]; then
    echo
    echo "== memory: one sample, 2 steps: peak resident memory per process, 4 processes (H=2 W=2) against 1"
    printf '  %-22s %12s %16s %8s\n' "network" "1 process" "4 (largest)" "ratio"
    s=$(sched m4 4 "H=2 W=2" on)
    for net in stdlib/mesh1k.net stdlib/mesh2k.net; do
        "$DSL" run "$net" --batch 1 --steps 2 >"$tmp/m1.out"
        "$DSL" run "$net" "$s" --steps 2 >"$tmp/m4.out"
        one=$(peak "$tmp/m1.out")
        four=$(peak "$tmp/m4.out")
        printf '  %-22s %8s MiB %12s MiB %8.3f\n' "$net" "$one" "$four" "$(calc "$four / $one")"
    done
    echo "  target: ratio <= 0.35"
fi

if [[ $parts == all || $parts == limit ]]; then
    net=stdlib/mesh2k.net
    echo
    echo "== a sample too big for one process: $net (2048x2048), 1 step, each process limited to $LIMIT_GIB GiB" \
        "of address space (ulimit -v)"
    s=$(sched l4 4 "H=2 W=2" on)
    for run in "1" "4"; do
        args=("$net" --batch 1 --steps 1)
        [[ $run == 4 ]] && args=("$net" "$s" --steps 1)
        set +e
        (ulimit -v $((LIMIT_GIB * 1024 * 1024)); "$DSL" run "${args[@]}") >"$tmp/l.out" 2>"$tmp/l.err"
        rc=$?
        set -e
        if [[ $rc == 0 ]]; then
            printf '  %s process(es): trained; peak %s MiB per process\n' "$run" "$(peak "$tmp/l.out")"
        else
            printf '  %s process(es): exit %s: %s\n' "$run" "$rc" "$(head -c 160 "$tmp/l.err")"
        fi
    done
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
