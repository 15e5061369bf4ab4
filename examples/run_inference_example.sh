#!/usr/bin/env bash
# The inference example: a small GPT-2 (2 layers, d_model 64, 4 heads, vocab 256, seeded random
# weights), batch 2 x 16 tokens, through the whole toolchain, checked against onnxruntime.
#
#   examples/run_inference_example.sh [--opt PATH] [--run PATH] [--out DIR]   # DIR: build/example-inference
#
# 1. examples/models/export.py writes DIR/model/{model.onnx, spec.yaml, inputs/input_ids.npy}
# 2. colossal-opt compiles it into DIR/model.cplan (+ weights .safetensors beside it)
# 3. colossal-run runs it, writing DIR/colossal/logits.npy
# 4. onnxruntime runs the same ONNX file; the script prints the max error and some argmax tokens.
# Needs only this repository and the packages of scripts/install-deps.sh (nothing from ../shared).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3  # Debian's torch/onnx/numpy live here, not in the first python3 on PATH
OUT="$ROOT/build/example-inference" OPT="${COLOSSAL_OPT:-$ROOT/build/bin/colossal-opt}" RUN="${COLOSSAL_RUN:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run_inference_example.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$RUN" ]; then
  RUN="$ROOT/build/bin/colossal-run"
  [ -x "$RUN" ] || [ ! -x "$ROOT/build-rt/bin/colossal-run" ] || RUN="$ROOT/build-rt/bin/colossal-run"
fi
for t in "$OPT" "$RUN"; do
  [ -x "$t" ] || { echo "run_inference_example.sh: $t not found; build first (see README) or pass --opt/--run" >&2; exit 2; }
done

step() { echo; echo "== $1"; shift; echo "\$ $*"; "$@"; }
rm -rf "$OUT/colossal" "$OUT/ort"
step "export a small GPT-2 to ONNX (opset 14, dynamic batch/seq; the spec binds them to [2, 16])" \
  "$PY" "$ROOT/examples/models/export.py" --arch gpt2 --opset 14 --out "$OUT/model"
cat "$OUT/model/spec.yaml"
step "compile" "$OPT" "$OUT/model/model.onnx" --spec "$OUT/model/spec.yaml" -o "$OUT/model.cplan"
step "run with colossal-run" "$RUN" "$OUT/model.cplan" --input "input_ids=$OUT/model/inputs/input_ids.npy" \
  --output-dir "$OUT/colossal"
step "run the same ONNX file with onnxruntime" node "$ROOT/test/e2e/ort_reference.js" "$OUT/model/model.onnx" \
  --input "input_ids=$OUT/model/inputs/input_ids.npy" --output-dir "$OUT/ort"

echo
echo "== compare"
"$PY" - "$OUT/colossal/logits.npy" "$OUT/ort/logits.npy" <<'PYEOF'
import sys
import numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if got.shape != ref.shape:
    sys.exit(f"shape mismatch: colossal {got.shape}, onnxruntime {ref.shape}")
err = float(np.abs(got - ref).max())
rel = err / float(np.abs(ref).max())
print(f"logits {list(ref.shape)}: max abs error {err:.3e} (relative to max|logit| {rel:.3e})")
print("argmax tokens, row 0, first 10 positions:")
print("  colossal    ", got[0, :10].argmax(-1).tolist())
print("  onnxruntime ", ref[0, :10].argmax(-1).tolist())
sys.exit(0 if rel <= 1e-4 else 1)
PYEOF
echo "OK: colossal-run agrees with onnxruntime"
