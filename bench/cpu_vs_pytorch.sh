#!/usr/bin/env bash
# dsl on this machine's CPU against the same network in PyTorch on the CPU (Debian's python3-torch,
# bench/pytorch_mesh.py --device cpu), both on all cores: one training step at each batch of BATCHES, median
# ms of each and their ratio; then the peak memory per process of dsl under a split of every spatial
# dimension in two (H=2 W=2 on 4 processes for an image network, D=2 H=2 W=2 on 8 for a volume network)
# against one process, at the same batch. Targets of the issues that asked for it: dsl at most 0.8x
# PyTorch's time (issue 25; 0.9x before); the 4-way peak at most 0.35x one process's, the 8-way at most 0.15x.
#
#   bench/cpu_vs_pytorch.sh                           # bench/unet_512.net and samples/regression_tiny.net
#   STEPS=10 bench/cpu_vs_pytorch.sh samples/mesh_tiny.net
#   BATCHES="1 2 4" bench/cpu_vs_pytorch.sh bench/cosmoflow_128.net bench/volume_stack_128.net
#   DSL=build/cli/dsl PYTHON=/usr/bin/python3 bench/cpu_vs_pytorch.sh
#   bench/cpu_vs_pytorch.sh --bf16 bench/mesh_stack_512.net   # 16 bits (issue 48's targets), below
#
# --bf16: dsl with every layer of precision=bfloat16 (one process) against PyTorch's forward under
# torch.autocast("cpu", torch.bfloat16), and dsl's own float32 step beside them, in one run: ms per step, the
# ratios bf16/autocast (target <= 0.8) and bf16/float32 (<= 0.6); then the peak memory of each dsl run and the
# activations `dsl explain` counts under each (target: bfloat16's <= 0.55 of float32's).
#
# Step times are medians over the steps after the first WARMUP (oneDNN's primitive creation, first touch).
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
BATCHES=${BATCHES:-1}
bf16=false nets=()
for arg in "$@"; do
    case $arg in
        --bf16) bf16=true ;;
        -*) echo "bench/cpu_vs_pytorch.sh: unknown option '$arg' (--bf16 is the one there is)" >&2; exit 2 ;;
        *) nets+=("$arg") ;;
    esac
done
((${#nets[@]})) || nets=(bench/unet_512.net samples/regression_tiny.net)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/lib.sh

die() { echo "bench/cpu_vs_pytorch.sh: $*" >&2; exit 1; }
[[ -x $DSL ]] || die "no $DSL; build first (scripts/setup)"
"$PYTHON" -c 'import torch' 2>/dev/null ||
    die "PyTorch is missing for $PYTHON (apt-get install python3-torch; PYTHON picks the Python)"
for net in "${nets[@]}"; do [[ -f $net ]] || die "no network '$net'"; done
# Debian's PyTorch may start with one OpenMP thread: give it every core, as dsl takes them.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

echo "bench/cpu_vs_pytorch.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(nproc) cores;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  $("$PYTHON" -c 'import torch; print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")');" \
    "dsl $(git rev-parse --short HEAD 2>/dev/null || echo "(no git)") at $DSL; $STEPS timed steps after $WARMUP"

# spatial_rank NET: 3 when its first input is a volume [N, C, D, H, W], else 2.
spatial_rank() {
    local dims
    dims=$(sed -n 's/^input [^[]*\[\([^]]*\)\].*/\1/p' "$1" | head -n 1 | tr -cd ',' | wc -c)
    echo $((dims - 1))
}
# median_ms JSONL: the median step of a dsl step log after the first WARMUP, in ms.
median_ms() { calc "$(sed -n 's/.*"seconds":\([-0-9.e+]*\).*/\1/p' "$1" | tail -n +$((WARMUP + 1)) | median) * 1000"; }
# pytorch_ms NET BATCH [ARGS...]: PyTorch's median step on the CPU, in ms (ARGS: pytorch_mesh.py's, --autocast).
pytorch_ms() {
    local net=$1 batch=$2
    shift 2
    "$PYTHON" bench/pytorch_mesh.py "$net" --device cpu --batch "$batch" --steps "$STEPS" --warmup "$WARMUP" "$@" \
        --json >"$tmp/torch.json" 2>"$tmp/torch.err" || { cat "$tmp/torch.err" >&2; die "PyTorch failed on $net"; }
    "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_ms"])' "$tmp/torch.json"
}
# activations NET SCHED: what `dsl explain` counts as activations per process, in bytes.
activations() {
    "$DSL" explain "$1" "$2" --json 2>"$tmp/explain.err" |
        "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["memory_bytes"]["activations"])'
}

if $bf16; then
    printf '\n  %-30s %5s %10s %9s %9s %9s %8s %11s %11s %8s %9s\n' network batch "autocast" "dsl f32" "dsl bf16" \
        "bf16/PyT" "bf16/f32" "f32 MiB" "bf16 MiB" ratio "act ratio"
    for net in "${nets[@]}"; do
        for batch in $BATCHES; do
            torch_ms=$(pytorch_ms "$net" "$batch" --autocast bfloat16)
            printf 'procs = 1\nbatch = %s\ndefault N=1\n' "$batch" >"$tmp/f32.sched"
            printf 'procs = 1\nbatch = %s\ndefault N=1 precision=bfloat16\n' "$batch" >"$tmp/bf16.sched"
            for p in f32 bf16; do
                "$DSL" run "$net" "$tmp/$p.sched" --steps $((WARMUP + STEPS)) --log "$tmp/$p.jsonl" >"$tmp/$p.out"
            done
            f32_ms=$(median_ms "$tmp/f32.jsonl") bf16_ms=$(median_ms "$tmp/bf16.jsonl")
            f32_mib=$(peak "$tmp/f32.out") bf16_mib=$(peak "$tmp/bf16.out")
            act=$(calc "$(activations "$net" "$tmp/bf16.sched") / $(activations "$net" "$tmp/f32.sched")")
            printf '  %-30s %5s %10.1f %9.1f %9.1f %9.3f %8.3f %11s %11s %8.3f %9.3f\n' "$net" "$batch" "$torch_ms" \
                "$f32_ms" "$bf16_ms" "$(calc "$bf16_ms / $torch_ms")" "$(calc "$bf16_ms / $f32_ms")" "$f32_mib" \
                "$bf16_mib" "$(calc "$bf16_mib / $f32_mib")" "$act"
        done
    done
    echo "  targets: bf16/PyT (autocast) <= 0.8; bf16/f32 <= 0.6; bfloat16's activations <= 0.55 of float32's"
    exit 0
fi

printf '\n  %-30s %5s %12s %10s %8s %14s %16s %8s\n' network batch "PyTorch ms" "dsl ms" "dsl/PyT" "dsl MiB, 1" \
    "MiB/proc, split" ratio
for net in "${nets[@]}"; do
    if (($(spatial_rank "$net") == 3)); then procs=8 split="D=2 H=2 W=2"; else procs=4 split="H=2 W=2"; fi
    for batch in $BATCHES; do
        torch_ms=$(pytorch_ms "$net" "$batch")
        "$DSL" run "$net" --batch "$batch" --steps $((WARMUP + STEPS)) --log "$tmp/one.jsonl" >"$tmp/one.out"
        dsl_ms=$(median_ms "$tmp/one.jsonl")
        printf 'procs = %s\nbatch = %s\ndefault %s overlap=on\n' "$procs" "$batch" "$split" >"$tmp/split.sched"
        "$DSL" run "$net" "$tmp/split.sched" --steps 2 >"$tmp/split.out"
        one_mib=$(peak "$tmp/one.out") split_mib=$(peak "$tmp/split.out")
        printf '  %-30s %5s %12.1f %10.1f %8.3f %14s %16s %8.3f\n' "$net" "$batch" "$torch_ms" "$dsl_ms" \
            "$(calc "$dsl_ms / $torch_ms")" "$one_mib" "$split_mib ($procs)" "$(calc "$split_mib / $one_mib")"
    done
done
echo "  targets: dsl/PyT <= 0.8; peak per process under the split <= 0.35 of one process's on 4, <= 0.15 on 8"
