#!/usr/bin/env bash
# Builds the quantization report table of docs/quantization.md: for each tiny model, BF16 (the HF
# directory) and every quantized type with and without AWQ — bits per weight, file size,
# perplexity on valid.txt by our default method and by --method llama, and the top-1 agreement
# with BF16 (argmax of every scored position, default method).
#
#   tools/quant_report.sh                 # everything (slow: two whole-corpus perplexity runs per row)
#   MODELS=tiny-gemma3 TYPES="q4_0" tools/quant_report.sh
#   TEXT=/tmp/short.txt CTX=128 tools/quant_report.sh    # a quick look on a shorter text
#
# Environment: EG (binary, default build/edgegemma), SHARED (../shared), OUT (work folder,
# default /tmp/eg_quant_report: the GGUFs and JSON of every run are kept there), MODELS, TYPES
# (edgegemma quantize --type values), TEXT, CTX (512), CALIB (train.txt), CALIB_TOKENS (32768),
# THREADS (0 = all cores), AWQ ("no yes": which AWQ settings to run).
# The markdown table is printed on stdout and written to $OUT/report.md.
# bits/weight = 8 × file bytes / parameter count (whole file: metadata, F32 norms and the
# embedding included), so it is a little above the nominal bits of the type.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
EG=${EG:-$ROOT/build/edgegemma}
SHARED=${SHARED:-$ROOT/../shared}
OUT=${OUT:-/tmp/eg_quant_report}
MODELS=${MODELS:-"tiny-gemma3 tiny-gemma2 tiny-gemma4 tiny-gemma4-moe"}
TYPES=${TYPES:-"q8_0 q4_0 q4_k_m eg_q4_g128"}
TEXT=${TEXT:-$SHARED/data/corpus/valid.txt}
CTX=${CTX:-512}
CALIB=${CALIB:-$SHARED/data/corpus/train.txt}
CALIB_TOKENS=${CALIB_TOKENS:-32768}
THREADS=${THREADS:-0}
AWQ=${AWQ:-"no yes"}

[ -x "$EG" ] || { echo "quant_report: no binary at $EG (set EG=...)" >&2; exit 1; }
mkdir -p "$OUT"
REPORT=$OUT/report.md

jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); v=d; [v:=v[k] for k in sys.argv[2].split('.')]; print(v)" "$1" "$2"; }
fmt() { python3 -c "import sys; v=sys.argv[1]; print('-' if v in ('None','') else ('%.4f' % float(v)))" "$1"; }

# perplexity MODEL METHOD NAME [extra args]: runs once, caches the JSON as $OUT/NAME.json.
ppl() {
  local model=$1 method=$2 name=$3
  shift 3
  if [ ! -s "$OUT/$name.json" ]; then
    if "$EG" perplexity -m "$model" -f "$TEXT" --ctx "$CTX" --method "$method" -t "$THREADS" --json "$@" \
        > "$OUT/$name.json.tmp" 2> "$OUT/$name.log"; then
      mv "$OUT/$name.json.tmp" "$OUT/$name.json"
    else
      rm -f "$OUT/$name.json.tmp"
      echo "quant_report: perplexity failed, see $OUT/$name.log" >&2
      return 1
    fi
  fi
}

{
  echo "| model | weights | AWQ | bits/weight | file size (bytes) | ppl (default, ctx $CTX) | ppl (llama method, ctx $CTX) | top-1 agreement with BF16 |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
} | tee "$REPORT"

for m in $MODELS; do
  dir=$SHARED/models/$m
  params=$("$EG" inspect -m "$dir" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['parameters']['total'])")
  bytes=$(cat "$dir"/*.safetensors | wc -c)
  ppl "$dir" default "$m-bf16-default" --save-top1 "$OUT/$m-bf16-top1.txt"
  ppl "$dir" llama "$m-bf16-llama"
  bpw=$(python3 -c "print('%.2f' % (8*$bytes/$params))")
  echo "| $m | BF16 (safetensors) | - | $bpw | $bytes | $(fmt "$(jget "$OUT/$m-bf16-default.json" ppl)") | $(fmt "$(jget "$OUT/$m-bf16-llama.json" ppl)") | 1 |" | tee -a "$REPORT"
  for t in $TYPES; do
    for awq in $AWQ; do
      name=$m-$t$([ "$awq" = yes ] && echo -awq || true)
      gguf=$OUT/$name.gguf
      if [ ! -s "$gguf" ]; then
        args=(quantize -m "$dir" -o "$gguf" --type "$t")
        [ "$awq" = yes ] && args+=(--awq --calib "$CALIB" --calib-tokens "$CALIB_TOKENS")
        "$EG" "${args[@]}" > "$OUT/$name.quantize.log" 2>&1 || { echo "quant_report: quantize failed, see $OUT/$name.quantize.log" >&2; continue; }
      fi
      ppl "$gguf" default "$name-default" --top1-ref "$OUT/$m-bf16-top1.txt" || true
      ppl "$gguf" llama "$name-llama" || true
      size=$(wc -c < "$gguf")
      bpw=$(python3 -c "print('%.2f' % (8*$size/$params))")
      pd=$([ -s "$OUT/$name-default.json" ] && jget "$OUT/$name-default.json" ppl || echo None)
      pl=$([ -s "$OUT/$name-llama.json" ] && jget "$OUT/$name-llama.json" ppl || echo None)
      ag=$([ -s "$OUT/$name-default.json" ] && jget "$OUT/$name-default.json" top1_agreement || echo None)
      echo "| $m | $t | $awq | $bpw | $size | $(fmt "$pd") | $(fmt "$pl") | $(fmt "$ag") |" | tee -a "$REPORT"
    done
  done
done
echo "quant_report: table in $REPORT" >&2
