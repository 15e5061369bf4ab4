#!/usr/bin/env bash
# The README's main command: train a small GPT on text every Debian system has, watch the loss fall,
# then generate text with the trained model.
#
#   examples/run_example.sh [--steps N] [--text FILE]... [--prompt TEXT] [--tokens N] [--threads N]
#                           [--opt PATH] [--run PATH] [--out DIR]          # DIR defaults to build/example
#    (installed, share/colossal/examples/run_example.sh: the tools on PATH, DIR ./colossal-example)
#
# 1. examples/models/export.py --preset gpt2-train: a GPT-2-style model (2 layers, d_model 128,
#    4 heads, context 64, byte vocabulary 256, untied head, nanoGPT's initialisation, 470k
#    parameters) -> DIR/model/model.onnx
# 2. examples/train/prepare_data.py: the corpus as byte tokens -> DIR/data/{train,val}.bin. Default
#    corpus: the license texts in /usr/share/common-licenses (Debian's base-files, ~250 KB of
#    English); --text FILE (repeatable) trains on your own files instead.
# 3. colossal-opt compiles the model with examples/train/train_demo.yaml (mode: train) -> DIR/model.cplan
# 4. colossal-run DIR/model.cplan train: --steps (default 1500; warm-up min(50, steps/10)) AdamW steps of 8 x 64 bytes, a
#    checkpoint in DIR/ckpt, an evaluation on val.bin every 250 steps; the loss table is printed as it
#    trains (the loss falls from 5.5 to about 1.7)
# 5. colossal-run DIR/model.cplan sample --checkpoint DIR/ckpt: --tokens (default 300) bytes after
#    --prompt, temperature 0.6
# Needs only this repository and the packages of scripts/install-deps.sh (nothing from ../shared).
# About a minute of training on 2 idle cores (1.5 minutes on a busy machine). The inference example (checked against onnxruntime) is
# examples/run_inference_example.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3  # Debian's torch/onnx/numpy live here, not in the first python3 on PATH
OUT="$ROOT/build/example" OPT="${COLOSSAL_OPT:-$ROOT/build/bin/colossal-opt}" RUN="${COLOSSAL_RUN:-}"
# An installed copy (cmake --install, the Debian package) has no build/: it uses the tools on PATH
# and writes beside the caller.
if [ ! -d "$ROOT/build" ] && [ ! -f "$ROOT/CMakeLists.txt" ]; then
  OUT="$PWD/colossal-example"
  [ -n "${COLOSSAL_OPT:-}" ] || OPT="$(command -v colossal-opt || echo colossal-opt)"
  [ -n "$RUN" ] || RUN="$(command -v colossal-run || echo colossal-run)"
fi
STEPS=1500 PROMPT="This License" TOKENS=300 THREADS=0 TEXTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --text) TEXTS+=("$2"); shift 2 ;;
    --prompt) PROMPT="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run_example.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "run_example.sh: --steps takes a positive integer, not '$STEPS'" >&2; exit 2; }
if [ -z "$RUN" ]; then
  RUN="$ROOT/build/bin/colossal-run"
  [ -x "$RUN" ] || [ ! -x "$ROOT/build-rt/bin/colossal-run" ] || RUN="$ROOT/build-rt/bin/colossal-run"
fi
for t in "$OPT" "$RUN"; do
  [ -x "$t" ] || { echo "run_example.sh: $t not found; build first (see README) or pass --opt/--run" >&2; exit 2; }
done
if [ ${#TEXTS[@]} -eq 0 ]; then
  for f in /usr/share/common-licenses/*; do [ -f "$f" ] && TEXTS+=("$f"); done
  [ ${#TEXTS[@]} -gt 0 ] || { echo "run_example.sh: /usr/share/common-licenses is empty; pass --text FILE" >&2; exit 2; }
fi
THREAD_ARGS=()
[ "$THREADS" = 0 ] || THREAD_ARGS=(--threads "$THREADS")

# Commands are echoed shell-quoted (printf %q), so that they can be copied and run as printed.
quoted() { printf '%q ' "$@" | sed 's/ $//'; }
step() { echo; echo "== $1"; shift; echo "\$ $(quoted "$@")"; "$@"; }
rm -rf "$OUT/ckpt" "$OUT/metrics.jsonl"
mkdir -p "$OUT"
step "export a small GPT (2 layers, d_model 128, byte vocabulary) from PyTorch to ONNX" \
  "$PY" "$ROOT/examples/models/export.py" --preset gpt2-train --out "$OUT/model"
step "the corpus as byte tokens (${#TEXTS[@]} file(s); the last 5% held out for evaluation)" \
  "$PY" "$ROOT/examples/train/prepare_data.py" "${TEXTS[@]}" --out "$OUT/data" --val-fraction 0.05
SPEC="$ROOT/examples/train/train_demo.yaml"
# The warm-up follows the run's length: min(50, STEPS/10) steps (the spec needs warmup <= total).
WARMUP=$(( STEPS / 10 < 50 ? STEPS / 10 : 50 ))
sed -e "s/total_steps: [0-9]*/total_steps: $STEPS/" -e "s/warmup_steps: [0-9]*/warmup_steps: $WARMUP/" \
  "$SPEC" > "$OUT/train.yaml"
echo; grep -v '^#' "$OUT/train.yaml"
step "compile for training" "$OPT" "$OUT/model/model.onnx" --spec "$OUT/train.yaml" -o "$OUT/model.cplan"

TRAIN=("$RUN" "$OUT/model.cplan" train --data "$OUT/data/train.bin" --token-dtype uint8 --steps "$STEPS"
       --metrics "$OUT/metrics.jsonl" --save "$OUT/ckpt" --save-every 500
       --eval-data "$OUT/data/val.bin" --eval-every 250 --eval-steps 4 "${THREAD_ARGS[@]}")
echo; echo "== train $STEPS steps (the table is read from $OUT/metrics.jsonl as it grows)"; echo "\$ $(quoted "${TRAIN[@]}")"
"${TRAIN[@]}" 2> "$OUT/train.log" &
PID=$!
"$PY" "$ROOT/examples/train/show_metrics.py" "$OUT/metrics.jsonl" --every 100 --follow "$PID" || true
if ! wait "$PID"; then
  cat "$OUT/train.log" >&2
  echo "run_example.sh: training failed" >&2
  exit 1
fi
"$PY" - "$OUT/metrics.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
k = max(1, len(rows) // 10)
first, last = (sum(r["loss"] for r in part) / len(part) for part in (rows[:k], rows[-k:]))
if not last < first - 0.5:
    sys.exit(f"run_example.sh: the loss did not fall (first steps {first:.3f}, last steps {last:.3f})")
PYEOF

step "generate $TOKENS bytes after the prompt with the trained weights (temperature 0.6)" \
  "$RUN" "$OUT/model.cplan" sample --checkpoint "$OUT/ckpt" --prompt "$PROMPT" --tokens "$TOKENS" \
  --temperature 0.6 --seed 1 "${THREAD_ARGS[@]}"
echo
echo "OK: trained $STEPS steps; checkpoint in $OUT/ckpt, metrics in $OUT/metrics.jsonl"
echo "    export the trained model: $(quoted "$RUN" "$OUT/model.cplan" export --onnx "$OUT/trained.onnx" --checkpoint "$OUT/ckpt")"
