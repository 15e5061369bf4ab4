#!/usr/bin/env bash
# Decode speed, colossal against llama.cpp, interleaved: for each model and concurrency, N rounds
# of (colossal in-process, llama.cpp f32, llama.cpp default), one after the other, so that the
# three see the same drift of a shared machine; prints each system's median over the rounds of
# its decode tok/s (C / median TPOT, bench/serve/report.py's definition) and the ratios.
#
#   bench/serve/interleave.sh [--rounds N] [--threads N] [--models "llama15m llama100m"]
#                             [--concurrency "1 8"] [--work DIR]
#
# Needs a work directory that bench/serve/run.sh has filled (plans, requests, GGUFs, the
# llama.cpp harness): run it once first (e.g. `bench/serve/run.sh --threads 1 --no-http --no-ort`).
# Defaults: 5 rounds, 1 thread, all three models, concurrency 1 and 8, build/bench/serve.
# Every llama.cpp f32 run's greedy tokens are checked against colossal's (report.py --check-greedy).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/serve"
PY=/usr/bin/python3
ROUNDS=5 THREADS=1 MODELS="aidreams260K llama15m llama100m" CONC="1 8" WORK="$ROOT/build/bench/serve"
RUN="${COLOSSAL_RUN:-$ROOT/build/bin/colossal-run}"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "interleave.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HARNESS="$WORK/llama_harness"
LIBDIR=""
for d in "$ROOT/third_party/npm" "$WORK/npm"; do
  [ -d "$d/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64" ] && { LIBDIR="$d/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"; break; }
done
[ -x "$HARNESS" ] && [ -n "$LIBDIR" ] || { echo "interleave.sh: no llama.cpp harness in $WORK (run bench/serve/run.sh first)" >&2; exit 2; }
echo "== command: bench/serve/interleave.sh --rounds $ROUNDS --threads $THREADS --models \"$MODELS\" --concurrency \"$CONC\""
echo "== load before: $(uptime)"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
decode() {  # decode tok/s of a timings file at concurrency $2: report.py's metric
  "$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import report
print("%.2f" % report.metrics(report.load(sys.argv[2]), int(sys.argv[3]))["decode_tok_s"])' "$HERE" "$1" "$2"
}
echo
echo "| model | C | colossal decode tok/s | llama.cpp f32 | llama.cpp default | / f32 | / default | rounds won (f32, default) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for M in $MODELS; do
  D="$WORK/$M"
  [ -f "$D/model.cplan" ] || { echo "interleave.sh: $D/model.cplan is missing (run bench/serve/run.sh --models $M first)" >&2; exit 2; }
  for C in $CONC; do
    F="$D/interleave-c$C"
    mkdir -p "$F"
    col=() f32=() def=()
    for r in $(seq "$ROUNDS"); do
      "$RUN" "$D/model.cplan" generate --requests "$D/requests-c$C.jsonl" --output "$F/colossal.jsonl" \
        --timings "$F/colossal.json" --max-batch-seqs "$C" --threads "$THREADS" 2> "$F/colossal.log" || { cat "$F/colossal.log" >&2; exit 1; }
      col+=("$(decode "$F/colossal.json" "$C")")
      for cfg in exact default; do
        "$HARNESS" --model "$D/model-f32.gguf" --lib-dir "$LIBDIR" --threads "$THREADS" --requests "$D/llama-c$C.txt" \
          --config "$cfg" --timings "$F/llama-$cfg.json" > "$F/llama-$cfg.log" 2>&1 || { cat "$F/llama-$cfg.log" >&2; exit 1; }
      done
      "$PY" "$HERE/report.py" --check-greedy "$F" > "$F/greedy.txt" || { cat "$F/greedy.txt" >&2; exit 1; }
      f32+=("$(decode "$F/llama-exact.json" "$C")")
      def+=("$(decode "$F/llama-default.json" "$C")")
    done
    "$PY" - "$M" "$C" "${col[*]}" "${f32[*]}" "${def[*]}" <<'EOF'
import sys
import numpy as np
m, c = sys.argv[1], sys.argv[2]
col, f32, dft = (np.array([float(x) for x in a.split()]) for a in sys.argv[3:6])
won = lambda a, b: int((a >= b).sum())
print(f"| {m} | {c} | {np.median(col):.1f} | {np.median(f32):.1f} | {np.median(dft):.1f} | "
      f"{np.median(col) / np.median(f32):.2f} | {np.median(col) / np.median(dft):.2f} | "
      f"{won(col, f32)}/{len(col)}, {won(col, dft)}/{len(col)} |")
EOF
  done
done
