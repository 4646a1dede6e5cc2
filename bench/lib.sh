# Shared by the shell benchmarks (sourced): schedules, fields of step logs, medians, arithmetic.
# They need $tmp, a scratch folder.

# sched NAME PROCS "SPLIT" OVERLAP: writes a one-line schedule for batch 1 and prints its path.
sched() {
    printf 'procs = %s\nbatch = 1\ndefault %s overlap=%s\n' "$2" "$3" "$4" >"$tmp/$1.sched"
    echo "$tmp/$1.sched"
}

# field LOG NAME: the values of a numeric field of every step after the first two, one per line.
field() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | tail -n +3; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
calc() { awk "BEGIN { print $* }"; }
peak() { sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$1"; }
