#!/usr/bin/env bash
# Side-by-side CPU speed of edgegemma and llama.cpp on the same files, in one run, interleaved.
#
#   LLAMA_BENCH=/path/to/llama-bench bench/compare-llamacpp.sh [options] ENTRY...
#
# ENTRY is a GGUF file that both engines run (gemma-3-1b-q4_0.gguf), or OURS=THEIRS to give each
# engine its own file of the same model (an HF folder for us, llama.cpp's BF16 GGUF for it:
# ~/synth/g1b=~/synth/g1b-bf16.gguf).
# Options: --rounds N (default 3: rounds alternate the engines, so a noisy neighbour hits both),
#          --threads N (default 2), --reps N (repetitions inside one bench call, default 3),
#          --depth D (the second depth of the table, default 1024; 0 = depth 0 only),
#          -p N / -n N (default 512 / 128), --out FILE (also write the table there).
# Prints one Markdown table: pp and tg at depth 0 and D for both engines (tok/s, the median over
# rounds of each call's median) and the ratio edgegemma / llama.cpp. Both use an F16 KV cache.
# Then the decode roofline: the read bandwidth build/bench/membw_bench measures with the same thread
# count once per round (the best of its 1-, 4- and 16-stream loops; median over rounds), the weight
# bytes a generated token reads (`edgegemma inspect
# --json`, per_token.bytes_checkpoint of our file), bandwidth ÷ bytes, and each engine's tg at
# depth 0 as a fraction of it. MEMBW=path overrides the probe (skipped when it is not built).
# Build llama.cpp with ../shared/peers/build-llamacpp.sh (never copy its code: we only run it).
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
rounds=3 threads=2 reps=3 depth=1024 np=512 ng=128 out=""
entries=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    -p) np=$2; shift 2 ;;
    -n) ng=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "compare-llamacpp: unknown option $1" >&2; exit 2 ;;
    *) entries+=("$1"); shift ;;  # made absolute below: the script runs from the repository root
  esac
done
[ ${#entries[@]} -gt 0 ] || { echo "compare-llamacpp: no model files given (see --help)" >&2; exit 2; }
abs() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
for i in "${!entries[@]}"; do
  e=${entries[$i]}
  if [ "${e#*=}" != "$e" ]; then entries[$i]="$(abs "${e%%=*}")=$(abs "${e#*=}")"; else entries[$i]=$(abs "$e"); fi
  for f in "${entries[$i]%%=*}" "${entries[$i]#*=}"; do
    [ -e "$f" ] || { echo "compare-llamacpp: no such file or folder: $f" >&2; exit 2; }
  done
done
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to llama.cpp\'s llama-bench binary}
[ -x "$LLAMA_BENCH" ] || { echo "compare-llamacpp: $LLAMA_BENCH is not executable" >&2; exit 2; }
if [ -n "${EG:-}" ]; then EG=$(abs "$EG"); else EG=build/edgegemma; fi
[ -x "$EG" ] || { echo "compare-llamacpp: $EG not built (scripts/setup)" >&2; exit 2; }
depths="0"; [ "$depth" -gt 0 ] && depths="0 $depth"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
MEMBW=${MEMBW:-build/bench/membw_bench}
for e in "${entries[@]}"; do
  "$EG" inspect -m "${e%%=*}" --json > "$work/inspect-$(echo "$e" | md5sum | cut -c1-8).json" 2>/dev/null || true
done

for ((r = 1; r <= rounds; r++)); do
  if [ -x "$MEMBW" ]; then
    echo "round $r/$rounds: read bandwidth ($threads threads)" >&2
    "$MEMBW" --benchmark_filter="ReadBandwidth.*/threads:$threads\$" --benchmark_format=json > "$work/bw-$r.json" 2>/dev/null || true
  fi
  for e in "${entries[@]}"; do
    ours=${e%%=*}; theirs=${e#*=}
    key=$(echo "$e" | md5sum | cut -c1-8)
    for d in $depths; do
      echo "round $r/$rounds: edgegemma $ours d$d" >&2
      OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} "$EG" bench -m "$ours" -p "$np" -n "$ng" --depth "$d" \
        -t "$threads" -r "$reps" --kv-type f16 --json 2>"$work/err" > "$work/eg-$key-$d-$r.json" ||
        { echo "compare-llamacpp: edgegemma bench failed on $ours:" >&2; grep -v '^bench: ' "$work/err" >&2; exit 1; }
    done
    echo "round $r/$rounds: llama.cpp $theirs" >&2
    "$LLAMA_BENCH" -m "$theirs" -p "$np" -n "$ng" -d "${depths// /,}" -t "$threads" -r "$reps" -o json \
      2>"$work/err" > "$work/ll-$key-$r.json" ||
      { echo "compare-llamacpp: llama-bench failed on $theirs:" >&2; tail -5 "$work/err" >&2; exit 1; }
  done
done

python3 - "$work" "$rounds" "$np" "$ng" "$depths" "$threads" "${entries[@]}" <<'EOF' | tee ${out:+"$out"}
import hashlib, json, statistics, subprocess, sys, os
work, rounds, np_, ng = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
depths = [int(d) for d in sys.argv[5].split()]
threads = sys.argv[6]
entries = sys.argv[7:]
def key(e): return hashlib.md5((e + "\n").encode()).hexdigest()[:8]
def med(v): return statistics.median(v) if v else float("nan")
cols = []
for d in depths:
    at = f"@d{d}" if d else ""
    cols += [(f"pp{np_}{at}", "pp", d), (f"tg{ng}{at}", "tg", d)]
hdr = "| file | " + " | ".join(f"{c} edgegemma | {c} llama.cpp | ratio" for c, _, _ in cols) + " |"
print(f"edgegemma vs llama.cpp, {threads} threads, F16 KV, median of {rounds} interleaved rounds (tok/s)\n")
print(hdr)
print("|" + "---|" * (1 + 3 * len(cols)))
for e in entries:
    k = key(e)
    row = [os.path.basename(e.split("=")[0].rstrip("/"))]
    for _, kind, d in cols:
        ours, theirs = [], []
        for r in range(1, rounds + 1):
            try:
                j = json.load(open(f"{work}/eg-{k}-{d}-{r}.json"))
                for t in j["tests"]:
                    if (kind == "pp" and t["n_prompt"] > 0) or (kind == "tg" and t["n_gen"] > 0):
                        ours.append(t["tok_s"]["median"])
            except Exception:
                pass
            try:
                for t in json.load(open(f"{work}/ll-{k}-{r}.json")):
                    if t.get("n_depth", 0) != d: continue
                    if (kind == "pp" and t["n_prompt"] > 0 and t["n_gen"] == 0) or (kind == "tg" and t["n_gen"] > 0 and t["n_prompt"] == 0):
                        theirs.append(t["avg_ts"])
            except Exception:
                pass
        a, b = med(ours), med(theirs)
        row += [f"{a:.1f}", f"{b:.1f}", f"{a / b:.2f}×" if b == b and b > 0 and a == a else "—"]
    print("| " + " | ".join(row) + " |")

bws = []
for r in range(1, rounds + 1):
    try:
        # the best of the variants (one stream per thread, 4 and 16 interleaved streams)
        bws.append(max(b["bytes_per_second"] for b in json.load(open(f"{work}/bw-{r}.json"))["benchmarks"]))
    except Exception:
        pass
if bws:
    bw = med(bws)
    print(f"\nDecode roofline: read bandwidth {bw / 1e9:.1f} GB/s ({threads} threads, membw_bench: best of 1, 4, 16 streams a thread, median of {len(bws)} rounds); "
          "bytes per token = weights a generated token reads (our file, as stored)\n")
    print(f"| file | bytes/token | roofline tok/s | tg{ng} edgegemma | of roofline | tg{ng} llama.cpp | of roofline |")
    print("|---|---|---|---|---|---|---|")
    for e in entries:
        k = key(e)
        try:
            per = json.load(open(f"{work}/inspect-{k}.json"))["per_token"]["bytes_checkpoint"]
        except Exception:
            continue
        ours, theirs = [], []
        for r in range(1, rounds + 1):
            try:
                ours += [t["tok_s"]["median"] for t in json.load(open(f"{work}/eg-{k}-0-{r}.json"))["tests"] if t["n_gen"] > 0]
            except Exception:
                pass
            try:
                theirs += [t["avg_ts"] for t in json.load(open(f"{work}/ll-{k}-{r}.json"))
                           if t.get("n_depth", 0) == 0 and t["n_gen"] > 0 and t["n_prompt"] == 0]
            except Exception:
                pass
        roof = bw / per
        a, b = med(ours), med(theirs)
        print(f"| {os.path.basename(e.split('=')[0].rstrip('/'))} | {per / 1e9:.3f} GB | {roof:.1f} | {a:.1f} | {100 * a / roof:.0f}% | {b:.1f} | {100 * b / roof:.0f}% |")
EOF
