#!/usr/bin/env bash
# Forward latency of a GPT (6 layers, d_model 384, 6 heads, T=256, vocab 256, fp32) at batch 1 and 8:
# colossal-run against onnxruntime (onnxruntime-node, CPU), same thread count, measured in the same run.
#
#   bench/gpt_forward/run.sh [--threads N] [--rounds N] [--repeat N] [--warmup N] [--batches "1 8"]
#                            [--work DIR] [--opt PATH] [--run PATH] [--ort-only]
#
# Defaults: 2 threads, 5 rounds of 20 timed runs after 3 warm-up runs, work directory
# build/bench/gpt_forward. Interleaved: each round runs onnxruntime, then colossal-run (each a fresh
# process timing --repeat forwards after --warmup), so drift in the machine's load hits both engines
# alike. Each engine reports the median and minimum of its in-process forward times (inputs already
# loaded, output not written), so process start and model loading are excluded on both sides. The
# table gives each engine's median of its round medians (and its overall minimum) and the median of
# the rounds' ratios, with every round's ratio listed. Before timing, the two engines' outputs are
# compared: a fast wrong answer is not a result.
# Tools: --opt/--run, else $COLOSSAL_OPT/$COLOSSAL_RUN, else build/bin (colossal-run also build-rt/bin).
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as the environment sets them (see shared/TOOLCHAIN.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
NODE="${NODE:-node}"
THREADS=2 ROUNDS=5 REPEAT=20 WARMUP=3 BATCHES="1 8" WORK="$ROOT/build/bench/gpt_forward" ORT_ONLY=0
OPT="${COLOSSAL_OPT:-}" RUN="${COLOSSAL_RUN:-}"
CMDLINE="bench/gpt_forward/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    --ort-only) ORT_ONLY=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
if [ "$ORT_ONLY" = 0 ]; then
  OPT="$(pick "$OPT" "$ROOT/build/bin/colossal-opt" "$(command -v colossal-opt || true)")"
  RUN="$(pick "$RUN" "$ROOT/build/bin/colossal-run" "$ROOT/build-rt/bin/colossal-run" "$(command -v colossal-run || true)")"
  [ -n "$OPT" ] || { echo "run.sh: colossal-opt not found (build it, or pass --opt, or --ort-only)" >&2; exit 2; }
  [ -n "$RUN" ] || { echo "run.sh: colossal-run not found (build it, or pass --run, or --ort-only)" >&2; exit 2; }
fi

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs online;" \
     "$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1) cores/socket," \
     "$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1) threads/core;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
[ "$ORT_ONLY" = 0 ] && echo "== tools: $OPT, $RUN"
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== onnxruntime-node: $(cd "$ROOT/third_party/npm" && "$NODE" -p "require('onnxruntime-node/package.json').version" 2>/dev/null || echo '?')"

mkdir -p "$WORK"
MAXB=$(echo $BATCHES | tr ' ' '\n' | sort -n | tail -1)
EXPORT=("$PY" "$ROOT/examples/models/export.py" --arch gpt2 --opset 14 --out "$WORK/model"
        --layers 6 --d-model 384 --heads 6 --seq 256 --context 256 --vocab 256 --batch "$MAXB")
echo "\$ ${EXPORT[*]}"
"${EXPORT[@]}" | sed -n 1p

# median and min from "forward: median X ms, min Y ms over N runs"
parse() { sed -n 's/.*forward: median \([0-9.eE+-]*\) ms, min \([0-9.eE+-]*\) ms.*/\1 \2/p' "$1" | tail -1; }

# median of numbers given as arguments
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minimum() { printf '%s\n' "$@" | sort -g | head -1; }

ROWS=()
for B in $BATCHES; do
  D="$WORK/b$B"
  mkdir -p "$D/inputs"
  "$PY" -c "import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[:$B])" \
    "$WORK/model/inputs/input_ids.npy" "$D/inputs/input_ids.npy"
  printf 'mode: inference\ninputs: {input_ids: [%d, 256]}\n' "$B" > "$D/spec.yaml"

  ORT=("$NODE" "$ROOT/test/e2e/ort_reference.js" "$WORK/model/model.onnx" --input "input_ids=$D/inputs/input_ids.npy"
       --threads "$THREADS" --bench --repeat "$REPEAT" --warmup "$WARMUP" --output-dir "$D/ort")
  echo "\$ ${ORT[*]}    ($ROUNDS rounds)"
  if [ "$ORT_ONLY" = 0 ]; then
    COMPILE=("$OPT" "$WORK/model/model.onnx" --spec "$D/spec.yaml" -o "$D/model.cplan")
    echo "\$ ${COMPILE[*]}"
    "${COMPILE[@]}"
    CRUN=("$RUN" "$D/model.cplan" --input "input_ids=$D/inputs/input_ids.npy" --output-dir "$D/colossal"
          --threads "$THREADS" --repeat "$REPEAT" --warmup "$WARMUP")
    echo "\$ ${CRUN[*]}    ($ROUNDS rounds, alternating with onnxruntime)"
  fi
  OM=() ON=() CM=() CN=() RATIOS=()
  for ((round = 1; round <= ROUNDS; round++)); do
    "${ORT[@]}" 2> "$D/ort.log" || { cat "$D/ort.log" >&2; exit 1; }
    read -r ORT_MED ORT_MIN < <(parse "$D/ort.log") || true
    [ -n "${ORT_MED:-}" ] || { echo "run.sh: no 'forward: median' line from onnxruntime:" >&2; cat "$D/ort.log" >&2; exit 1; }
    OM+=("$ORT_MED") ON+=("$ORT_MIN")
    [ "$ORT_ONLY" = 1 ] && continue
    "${CRUN[@]}" > /dev/null 2> "$D/colossal.log" || { cat "$D/colossal.log" >&2; exit 1; }
    read -r C_MED C_MIN < <(parse "$D/colossal.log") || true
    [ -n "${C_MED:-}" ] || { echo "run.sh: no 'forward: median' line from colossal-run:" >&2; cat "$D/colossal.log" >&2; exit 1; }
    CM+=("$C_MED") CN+=("$C_MIN")
    RATIOS+=("$(awk -v o="$ORT_MED" -v c="$C_MED" 'BEGIN { printf "%.2f", o / c }')")
    if [ "$round" = 1 ]; then
      ERR=$("$PY" -c "
import numpy as np, sys
a, r = np.load(sys.argv[1]), np.load(sys.argv[2])
print('%.1e' % (np.abs(a - r).max() / np.abs(r).max()) if a.shape == r.shape else 'shape %s vs %s' % (a.shape, r.shape))
" "$D/colossal/logits.npy" "$D/ort/logits.npy")
      echo "batch $B: outputs agree to max rel err $ERR"
    fi
    echo "batch $B round $round: onnxruntime $ORT_MED ms, colossal-run $C_MED ms (median of $REPEAT), ratio ${RATIOS[-1]}"
  done
  if [ "$ORT_ONLY" = 1 ]; then
    ROWS+=("$B|-|$(median "${OM[@]}") ($(minimum "${ON[@]}"))|-|-|-")
    continue
  fi
  ROWS+=("$B|$(median "${CM[@]}") ($(minimum "${CN[@]}"))|$(median "${OM[@]}") ($(minimum "${ON[@]}"))|$(median "${RATIOS[@]}")|${RATIOS[*]}|$ERR")
done

echo
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "GPT forward, 6 layers, d_model 384, 6 heads, T=256, vocab 256, fp32; $THREADS threads; $ROUNDS interleaved rounds of $REPEAT runs after $WARMUP warm-up"
echo "| batch | colossal-run ms, median (min) | onnxruntime ms, median (min) | speedup (ort / colossal), median of rounds | per round | max rel err |"
echo "|---:|---:|---:|---:|---|---:|"
for r in "${ROWS[@]}"; do IFS='|' read -r b c o s p e <<< "$r"; echo "| $b | $c | $o | $s | $p | $e |"; done
