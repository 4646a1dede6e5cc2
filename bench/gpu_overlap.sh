#!/usr/bin/env bash
# Halo exchange against interior compute on the GPU: one sample split in rows over 2 processes, overlap off
# and on, against one process, on the GPUs this machine has: through host memory over MPI when the 2
# processes share one GPU, and over NCCL as well when there are 2 GPUs. With overlap on, the exchange runs
# while the interior of each convolution is computed, so the step should lose less to the halo than with it
# off. Needs a dsl built with the GPU backend and a GPU.
#
#   bench/gpu_overlap.sh                         # bench/mesh_stack_512.net and stdlib/mesh1k.net
#   STEPS=12 bench/gpu_overlap.sh stdlib/mesh2k.net
#
# Step times are medians over the steps after the first two (cuDNN's algorithm search, first touch).
set -euo pipefail
cd "$(dirname "$0")/.."
DSL=${DSL:-build/cli/dsl}
STEPS=${STEPS:-10}
nets=("$@")
((${#nets[@]})) || nets=(bench/mesh_stack_512.net stdlib/mesh1k.net)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/lib.sh

[[ -x $DSL ]] || { echo "bench/gpu_overlap.sh: no $DSL; build first" >&2; exit 1; }
if ! "$DSL" run samples/mesh_tiny.net --device gpu --steps 1 >"$tmp/probe.out" 2>&1; then
    echo "bench/gpu_overlap.sh: $DSL cannot train on a GPU here: $(head -c 200 "$tmp/probe.out")" >&2
    exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 1)
echo "bench/gpu_overlap.sh: $(sed -n 's/^on \(.*\) (.*/\1/p' "$tmp/probe.out"); $gpus GPU(s)"

comms=(mpi)
((gpus >= 2)) && comms+=(nccl)
for net in "${nets[@]}"; do
    echo
    echo "== $net, one sample, $STEPS steps, median of the last $((STEPS - 2))"
    printf '  %-44s %10s %14s\n' "run" "ms/step" "halo MB/step"
    "$DSL" run "$net" --device gpu --batch 1 --steps "$STEPS" --log "$tmp/one.jsonl" >/dev/null
    printf '  %-44s %10.2f %14s\n' "1 process" "$(calc "$(field "$tmp/one.jsonl" seconds | median) * 1000")" "-"
    for comm in "${comms[@]}"; do
        for overlap in off on; do
            s=$(sched "h2_$overlap" 2 "H=2" "$overlap")
            "$DSL" run "$net" "$s" --device gpu --gpu-comm "$comm" --steps "$STEPS" --log "$tmp/two.jsonl" >/dev/null
            printf '  %-44s %10.2f %14.2f\n' "2 processes, H=2, $comm, overlap $overlap" \
                "$(calc "$(field "$tmp/two.jsonl" seconds | median) * 1000")" \
                "$(calc "$(field "$tmp/two.jsonl" halo_bytes | median) / 1000000")"
        done
    done
done
