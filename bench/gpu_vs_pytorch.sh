#!/usr/bin/env bash
# dsl's GPU backend against PyTorch on the mesh networks: for each network, the largest batch that fits for
# PyTorch (bench/pytorch_mesh.py --max-batch, the same network in eager PyTorch with cuDNN), then
# `dsl run --device gpu` at that batch; ms per step of both and their ratio. Needs an NVIDIA GPU, PyTorch
# with CUDA, and a dsl built with the GPU backend.
#
#   bench/gpu_vs_pytorch.sh                              # mesh_stack_256, mesh_stack_512, mesh1k
#   bench/gpu_vs_pytorch.sh --tf32                       # both with TF32 convolutions (default: strict FP32)
#   bench/gpu_vs_pytorch.sh --bf16                       # dsl's precision=bfloat16 against PyTorch's autocast
#   bench/gpu_vs_pytorch.sh --fp16                       # precision=float16 against autocast and GradScaler
#   bench/gpu_vs_pytorch.sh --host-inputs stdlib/mesh1k.net   # PyTorch copies its batch from the host each step
#   STEPS=30 WARMUP=5 BATCH=8 DSL=build-gpu/cli/dsl PYTHON=python3 LOGS=gpu-logs bench/gpu_vs_pytorch.sh
#
# BATCH skips the search and runs both at that batch; DSL_ARGS adds options to every `dsl run`; LOGS keeps
# every run's output and step log in that folder. Step times are medians over the steps after the first
# WARMUP (cuDNN's algorithm search, first touch of memory).
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
BATCH=${BATCH:-}
read -r -a dsl_args <<<"${DSL_ARGS:-}"

die() { echo "bench/gpu_vs_pytorch.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

tf32=() host=() nets=() autocast=()
for arg in "$@"; do
    case $arg in
        --tf32) tf32=(--tf32) ;;
        --bf16) autocast=(--autocast bfloat16) ;;
        --fp16) autocast=(--autocast float16) ;;
        --host-inputs) host=(--host-inputs) ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "bench/gpu_vs_pytorch.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
        *) nets+=("$arg") ;;
    esac
done
((${#nets[@]})) || nets=(bench/mesh_stack_256.net bench/mesh_stack_512.net stdlib/mesh1k.net)
[[ $STEPS =~ ^[1-9][0-9]*$ && $WARMUP =~ ^[0-9]+$ ]] || die "STEPS must be a positive integer and WARMUP an integer"
[[ -z $BATCH || $BATCH =~ ^[1-9][0-9]*$ ]] || die "BATCH must be a positive integer"
for net in "${nets[@]}"; do [[ -f $net ]] || die "no network '$net'"; done

if [[ -n ${LOGS:-} ]]; then
    mkdir -p "$LOGS"
    tmp=$LOGS
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

# What the comparison needs, each with the reason when it is missing.
command -v nvidia-smi >/dev/null || die "no GPU: nvidia-smi is not on PATH (this benchmark needs an NVIDIA GPU)"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1) || true
[[ -n $gpu ]] || die "no GPU: nvidia-smi lists none"
"$PYTHON" -c 'import torch' 2>/dev/null ||
    die "PyTorch is missing: '$PYTHON -c \"import torch\"' fails (PYTHON picks the Python)"
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    die "PyTorch sees no GPU: torch.cuda.is_available() is False (a CPU-only PyTorch?)"
[[ -x $DSL ]] || die "no $DSL: build dsl with its GPU backend (cmake -DDSL_GPU=ON), or set DSL"
if ((${#tf32[@]})) && ! "$DSL" run --help 2>&1 | grep -q -- '--tf32'; then
    die "$DSL run has no --tf32 option"
fi
if ! "$DSL" run samples/mesh_tiny.net --device gpu --batch 2 --steps 1 >"$tmp/preflight.out" 2>&1; then
    die "$DSL cannot train on the GPU: $(grep -m 1 . "$tmp/preflight.out" | cut -c 1-200)"
fi

# json FILE KEY...: the values of top-level keys of a JSON object, on one line.
json() { "$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(*(d[k] for k in sys.argv[2:]))' "$@"; }
# step_ms LOG: the median and the least ms per step of a dsl --log after the first WARMUP steps.
step_ms() {
    "$PYTHON" -c '
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
ms = [s["seconds"] * 1e3 for s in steps[int(sys.argv[2]):]]
print(f"{statistics.median(ms):.3f} {min(ms):.3f}" if ms else "nan nan")' "$1" "$WARMUP"
}
calc() { awk "BEGIN { printf \"%.${2:-3}f\", $1 }"; }

precision=FP32 copies=""
((${#tf32[@]})) && precision=TF32
# 16 bits: every layer of dsl's of that precision (one process), PyTorch's forward under autocast.
if ((${#autocast[@]})); then
    precision="${autocast[1]} (dsl: default precision=${autocast[1]}; PyTorch: autocast)"
    printf 'procs = 1\ndefault N=1 precision=%s\n' "${autocast[1]}" >"$tmp/sixteen.sched"
    dsl_args+=("$tmp/sixteen.sched")
fi
((${#host[@]})) && copies="; PyTorch copies its inputs from the host in every step"
echo "bench/gpu_vs_pytorch.sh: $gpu"
versions=$("$PYTHON" -c '
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")')
echo "  $versions;" \
    "dsl $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') at $DSL"
echo "  $precision convolutions, NCHW float32; $STEPS timed steps after $WARMUP warm-up;" \
    "batch: ${BATCH:-the largest that fits for PyTorch}$copies"

rows=() failed=0
for net in "${nets[@]}"; do
    name=$(basename "$net" .net)
    size=(--max-batch)
    [[ -n $BATCH ]] && size=(--batch "$BATCH")
    echo
    echo "== $net: PyTorch"
    if ! "$PYTHON" bench/pytorch_mesh.py "$net" "${size[@]}" --steps "$STEPS" --warmup "$WARMUP" \
        ${tf32[@]+"${tf32[@]}"} ${host[@]+"${host[@]}"} ${autocast[@]+"${autocast[@]}"} --json >"$tmp/$name.pytorch.json"; then
        rows+=("$(printf '%-28s %6s  %s' "$net" "-" "PyTorch failed (above)")")
        failed=1
        continue
    fi
    read -r batch torch_ms torch_min peak \
        <<<"$(json "$tmp/$name.pytorch.json" batch median_ms min_ms max_memory_allocated)"
    # dsl at PyTorch's batch; where it runs out of memory there, at half that batch and so on, with PyTorch
    # timed again at dsl's batch, so that the two are compared on the same work.
    dsl_batch=$batch
    while true; do
        echo "== $net: dsl at batch $dsl_batch"
        if "$DSL" run "$net" --device gpu --batch "$dsl_batch" --steps $((WARMUP + STEPS)) \
            --log "$tmp/$name.dsl.jsonl" ${tf32[@]+"${tf32[@]}"} ${dsl_args[@]+"${dsl_args[@]}"} \
            >"$tmp/$name.dsl.out" 2>"$tmp/$name.dsl.err"; then
            ran=1
            break
        fi
        ran=0
        if ! grep -q "out of memory" "$tmp/$name.dsl.err" || ((dsl_batch == 1)); then break; fi
        dsl_batch=$((dsl_batch / 2))
    done
    if ((ran)); then
        note=""
        if ((dsl_batch != batch)); then
            note="  (PyTorch fits $batch)"
            echo "== $net: PyTorch again, at dsl's batch $dsl_batch"
            "$PYTHON" bench/pytorch_mesh.py "$net" --batch "$dsl_batch" --steps "$STEPS" --warmup "$WARMUP" \
                ${tf32[@]+"${tf32[@]}"} ${host[@]+"${host[@]}"} ${autocast[@]+"${autocast[@]}"} --json \
                >"$tmp/$name.pytorch.json"
            read -r torch_ms torch_min peak <<<"$(json "$tmp/$name.pytorch.json" median_ms min_ms max_memory_allocated)"
        fi
        read -r dsl_ms dsl_min <<<"$(step_ms "$tmp/$name.dsl.jsonl")"
        tail -n 1 "$tmp/$name.dsl.out"
        rows+=("$(printf '%-28s %6s %12.2f %12.2f %10s %12.2f %12.2f %10.2f%s' "$net" "$dsl_batch" "$torch_ms" \
            "$dsl_ms" "$(calc "$dsl_ms / $torch_ms" 3)" "$torch_min" "$dsl_min" "$(calc "$peak / 1073741824" 2)" \
            "$note")")
    else
        reason=$(grep -m 1 . "$tmp/$name.dsl.err" | cut -c 1-100 || true)
        echo "dsl failed: ${reason:-exit status without a message}"
        rows+=("$(printf '%-28s %6s %12.2f %12s  dsl failed: %s' "$net" "$dsl_batch" "$torch_ms" "-" "$reason")")
        failed=1
    fi
done

echo
echo "== ms per step (median; min of the same steps), dsl / PyTorch (below 1: dsl is faster), PyTorch's peak"
echo "   torch.cuda.max_memory_allocated"
printf '%-28s %6s %12s %12s %10s %12s %12s %10s\n' "network" "batch" "PyTorch ms" "dsl ms" "dsl/PyT" \
    "PyTorch min" "dsl min" "PyT GiB"
printf '%s\n' "${rows[@]}"
exit "$failed"
