#!/usr/bin/env bash
# Decode speed when another process owns a core: OpenMP's active and passive wait vs our thread
# pool (src/backend/cpu/thread_pool.h), in one run, interleaved.
#
#   EG_OMP=/path/to/openmp/edgegemma bench/contention_bench.sh [options] MODEL...
#
# EG (default build/edgegemma) is this build (the thread pool); EG_OMP is a build from before the
# pool (OpenMP), run with OMP_WAIT_POLICY=active and =passive; without EG_OMP only the pool runs.
# Each call is `edgegemma bench -m MODEL -p 0 -n N -t THREADS -r REPS --json`, pinned with taskset
# to --cores; "hog" runs it while a busy loop (another process) spins on the first of those cores.
# Options: --rounds N (default 3; each round runs every configuration alone and with the hog),
#          --threads N (default 2), --cores LIST (default 0,1), -n N (default 64), --reps N
#          (default 3), --out FILE (also write the table there).
# Prints a Markdown table: decode tok/s alone, with the hog, and hog/alone (medians over rounds of
# each call's median).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 threads=2 cores=0,1 ng=64 reps=3 out=""
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    -n) ng=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "contention_bench: unknown option $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[ ${#models[@]} -gt 0 ] || { echo "contention_bench: no models given (see --help)" >&2; exit 2; }
EG=${EG:-build/edgegemma}
[ -x "$EG" ] || { echo "contention_bench: $EG not built" >&2; exit 2; }
configs=("pool")
if [ -n "${EG_OMP:-}" ]; then
  [ -x "$EG_OMP" ] || { echo "contention_bench: $EG_OMP is not executable" >&2; exit 2; }
  configs=("openmp-active" "openmp-passive" "pool")
fi
hog_core=${cores%%[,-]*}
work=$(mktemp -d)
hog=""
cleanup() { [ -n "$hog" ] && kill "$hog" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

run() {  # config model file
  local bin=$EG policy=""
  case "$1" in
    openmp-active) bin=$EG_OMP policy=active ;;
    openmp-passive) bin=$EG_OMP policy=passive ;;
  esac
  env ${policy:+OMP_WAIT_POLICY=$policy} taskset -c "$cores" "$bin" bench -m "$2" -p 0 -n "$ng" -t "$threads" \
    -r "$reps" --json 2>/dev/null > "$3"
}

for ((r = 1; r <= rounds; r++)); do
  for m in "${models[@]}"; do
    key=$(echo "$m" | md5sum | cut -c1-8)
    for c in "${configs[@]}"; do
      echo "round $r/$rounds: $c $m alone" >&2
      run "$c" "$m" "$work/$key-$c-alone-$r.json"
      echo "round $r/$rounds: $c $m hog" >&2
      taskset -c "$hog_core" bash -c 'while :; do :; done' &
      hog=$!
      sleep 0.2
      run "$c" "$m" "$work/$key-$c-hog-$r.json"
      kill "$hog"; wait "$hog" 2>/dev/null || true; hog=""
    done
  done
done

python3 - "$work" "$rounds" "$ng" "$threads" "$cores" "${#configs[@]}" "${configs[@]}" "${models[@]}" <<'EOF' | tee ${out:+"$out"}
import hashlib, json, os, statistics, sys
work, rounds, ng, threads, cores, nc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
configs, models = sys.argv[7:7 + nc], sys.argv[7 + nc:]
def key(m): return hashlib.md5((m + "\n").encode()).hexdigest()[:8]
def tok_s(path):
    try:
        with open(path) as f: return json.load(f)["tests"][0]["tok_s"]["median"]
    except Exception: return None
print(f"decode tg{ng}, {threads} threads pinned to CPUs {cores}; hog = a busy loop on CPU {cores.split(',')[0].split('-')[0]}; "
      f"median of {rounds} interleaved rounds (tok/s)\n")
print("| model | threads | alone | with hog | hog / alone |")
print("|---|---|---:|---:|---:|")
for m in models:
    for c in configs:
        v = {}
        for cond in ("alone", "hog"):
            xs = [x for x in (tok_s(os.path.join(work, f"{key(m)}-{c}-{cond}-{r}.json")) for r in range(1, rounds + 1)) if x]
            v[cond] = statistics.median(xs) if xs else float("nan")
        print(f"| {os.path.basename(m.rstrip('/'))} | {c} | {v['alone']:.1f} | {v['hog']:.1f} | {v['hog'] / v['alone']:.2f} |")
EOF
