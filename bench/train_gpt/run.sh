#!/usr/bin/env bash
# Training throughput of the nanoGPT character model (6 layers, d_model 384, 6 heads, T=256, B=8,
# vocab 256, fp32; examples/train/train_nanogpt_char.yaml: AdamW, clipping, cosine schedule):
# colossal-run train against PyTorch (Debian's torch 1.13, torch.optim.AdamW), same model, same initial
# weights, same data order, same thread count, measured in the same run.
#
#   bench/train_gpt/run.sh [--threads N] [--steps N] [--warmup N] [--rounds N] [--work DIR]
#                          [--data TEXT] [--opt PATH] [--run PATH] [--torch-only]
#
# Each round trains PyTorch, then colossal-run, for --steps steps; with --rounds > 1 the engines
# alternate (torch, colossal, torch, colossal, ...), so that a machine whose load drifts affects both,
# and the summary row takes each engine's median round.
# Defaults: threads = the number of CPUs (nproc), 1 round of 20 steps of which the first 3 are warm-up, work
# directory build/bench/train_gpt, data ../shared/data/tinyshakespeare.txt (else /usr/share/common-licenses).
# Tools: --opt/--run, else $COLOSSAL_OPT/$COLOSSAL_RUN, else build/bin (colossal-run also build-rt/bin).
# Each engine's tokens/s is B*T*steps over the summed wall time of its timed steps, from its metrics
# lines (bench/train_gpt/compare.py): compilation, process start and model loading are excluded on
# both sides. The first 5 steps' losses must agree within 1e-3 before any time is reported.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
THREADS="$(nproc)" STEPS=20 WARMUP=3 ROUNDS=1 WORK="$ROOT/build/bench/train_gpt" TORCH_ONLY=0
DATA="$ROOT/../shared/data/tinyshakespeare.txt"
[ -f "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
OPT="${COLOSSAL_OPT:-}" RUN="${COLOSSAL_RUN:-}"
CMDLINE="bench/train_gpt/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    --torch-only) TORCH_ONLY=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
if [ "$TORCH_ONLY" = 0 ]; then
  OPT="$(pick "$OPT" "$ROOT/build/bin/colossal-opt" "$(command -v colossal-opt || true)")"
  RUN="$(pick "$RUN" "$ROOT/build/bin/colossal-run" "$ROOT/build-rt/bin/colossal-run" "$(command -v colossal-run || true)")"
  [ -n "$OPT" ] || { echo "run.sh: colossal-opt not found (build it, or pass --opt, or --torch-only)" >&2; exit 2; }
  [ -n "$RUN" ] || { echo "run.sh: colossal-run not found (build it, or pass --run, or --torch-only)" >&2; exit 2; }
fi
if [ ! -f "$DATA" ]; then
  DATA=/usr/share/common-licenses
  [ -d "$DATA" ] || { echo "run.sh: no data: pass --data TEXT" >&2; exit 2; }
fi

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs online;" \
     "$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1) cores/socket," \
     "$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1) threads/core; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== torch: $("$PY" -c 'import torch; print(torch.__version__, "BLAS:", torch.backends.mkl.is_available() and "MKL" or "not MKL", "| mkldnn:", torch.backends.mkldnn.is_available())' 2>/dev/null)"
[ "$TORCH_ONLY" = 0 ] && echo "== tools: $OPT, $RUN"
echo "== threads: $THREADS (colossal-run --threads, torch.set_num_threads); $ROUNDS round(s) of $STEPS steps, first $WARMUP untimed"

mkdir -p "$WORK"
SPEC="$ROOT/examples/train/train_nanogpt_char.yaml"
EXPORT=("$PY" "$ROOT/examples/models/export.py" --preset nanogpt-char --out "$WORK/model" --quiet)
echo "\$ ${EXPORT[*]}"
"${EXPORT[@]}"
if [ -d "$DATA" ]; then TEXTS=("$DATA"/*); else TEXTS=("$DATA"); fi
"$PY" "$ROOT/examples/train/prepare_data.py" "${TEXTS[@]}" --out "$WORK/data" | sed 's/^/   /'

TORCH=("$PY" "$ROOT/examples/train/torch_reference.py" --model-dir "$WORK/model" --spec "$SPEC"
       --data "$WORK/data/train.bin" --steps "$STEPS" --threads "$THREADS")
if [ "$TORCH_ONLY" = 1 ]; then
  echo "\$ ${TORCH[*]} --metrics $WORK/torch.jsonl"
  "${TORCH[@]}" --metrics "$WORK/torch.jsonl"
  "$PY" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
s = sum(8 * 256 / r['tokens_per_s'] for r in rows)
print(f'PyTorch: {8 * 256 * len(rows) / s:.0f} tokens/s ({s / len(rows) * 1e3:.0f} ms/step)')" "$WORK/torch.jsonl" "$WARMUP"
  exit 0
fi
COMPILE=("$OPT" "$WORK/model/model.onnx" --spec "$SPEC" -o "$WORK/model.cplan")
echo "\$ ${COMPILE[*]}"
"${COMPILE[@]}"
CRUN=("$RUN" "$WORK/model.cplan" train --data "$WORK/data/train.bin" --token-dtype uint8 --steps "$STEPS"
      --threads "$THREADS")
ROWS=()
for ((round = 1; round <= ROUNDS; round++)); do
  echo "\$ ${TORCH[*]} --metrics $WORK/torch.$round.jsonl"
  "${TORCH[@]}" --metrics "$WORK/torch.$round.jsonl"
  echo "\$ ${CRUN[*]} --metrics $WORK/colossal.$round.jsonl"
  "${CRUN[@]}" --metrics "$WORK/colossal.$round.jsonl" 2> "$WORK/colossal.$round.log" ||
    { cat "$WORK/colossal.$round.log" >&2; exit 1; }
  ROWS+=("$("$PY" "$ROOT/bench/train_gpt/compare.py" "$WORK/colossal.$round.jsonl" "$WORK/torch.$round.jsonl" \
            --warmup "$WARMUP" --tokens-per-step $((8 * 256)) --label "round $round")")
  echo "${ROWS[-1]}"
done

echo
echo "nanoGPT char model training, 6 layers, d_model 384, 6 heads, T=256, B=8, vocab 256, fp32, AdamW;" \
     "$THREADS threads; $ROUNDS round(s) of $STEPS steps, first $WARMUP untimed; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | colossal-run tokens/s | PyTorch 1.13 tokens/s | speedup (colossal / torch) | max rel loss diff, first 5 steps |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
if [ "$ROUNDS" -gt 1 ]; then
  printf '%s\n' "${ROWS[@]}" | "$PY" -c "
import re, statistics, sys
rows = [re.findall(r'\| ([0-9.]+) \(', l) for l in sys.stdin if l.startswith('|')]
c = statistics.median(float(r[0]) for r in rows); t = statistics.median(float(r[1]) for r in rows)
print(f'| median | {c:.0f} | {t:.0f} | {c / t:.2f} | |')"
fi
