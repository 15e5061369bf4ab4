#!/usr/bin/env bash
# The video diffusion transformer example: generate clips of moving shapes, train a small
# spatial-temporal DiT on them with colossal-run, then sample clips with the compiled denoiser into
# an animated GIF.
#
#   examples/video_dit/run.sh [--steps N] [--mesh one|dp2|tp2] [--sample-steps K] [--threads N]
#                             [--opt PATH] [--run PATH] [--out DIR]     # DIR defaults to build/video_dit
#
# 1. make_data.py: 2048 clips of 8 frames of 16x16 pixels, a square or a disc (6 pixels across)
#    moving 1 pixel per frame and bouncing off the edges -> DIR/clips.npy
# 2. export.py: VideoDiT (3 blocks of spatial attention, temporal attention and an MLP, width 64,
#    4x4 patches, adaLN on the timestep; 328k parameters) with its rectified-flow loss ->
#    DIR/train.onnx, the denoiser alone -> DIR/denoiser.onnx, the specs DIR/spec*.yaml
# 3. colossal-opt compiles DIR/train.onnx with DIR/spec.yaml (--mesh dp2: spec_dp2.yaml, tp2:
#    spec_tp2.yaml) -> DIR/train.cplan
# 4. colossal-run DIR/train.cplan train: --steps (default 1500) AdamW steps of 16 clips, noise and
#    timesteps drawn by colossal-run (train.inputs), checkpoint in DIR/ckpt; on two ranks
#    (--nproc 2) for dp2 and tp2
# 5. sample.py: the trained weights into the denoiser graph, compiled for inference, --sample-steps
#    (default 25) Euler steps from noise -> DIR/samples.gif (8 clips side by side)
# Fails unless the loss falls. About 9 minutes on 2 shared cores (5 minutes of CPU; README.md).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY=/usr/bin/python3  # Debian's torch/onnx/numpy live here, not in the first python3 on PATH
OUT="$ROOT/build/video_dit" OPT="${COLOSSAL_OPT:-$ROOT/build/bin/colossal-opt}" RUN="${COLOSSAL_RUN:-$ROOT/build/bin/colossal-run}"
STEPS=1500 MESH=one SAMPLE_STEPS=25 THREADS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --mesh) MESH="$2"; shift 2 ;;
    --sample-steps) SAMPLE_STEPS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --steps takes a positive integer, not '$STEPS'" >&2; exit 2; }
case "$MESH" in
  one) SPEC=spec.yaml NPROC=() ;;
  dp2) SPEC=spec_dp2.yaml NPROC=(--nproc 2) ;;
  tp2) SPEC=spec_tp2.yaml NPROC=(--nproc 2) ;;
  *) echo "run.sh: --mesh takes one, dp2 or tp2, not '$MESH'" >&2; exit 2 ;;
esac
for t in "$OPT" "$RUN"; do
  [ -x "$t" ] || { echo "run.sh: $t not found; build first (scripts/build.sh) or pass --opt/--run" >&2; exit 2; }
done
# Two ranks on 2 cores: one thread each.
[ ${#NPROC[@]} -eq 0 ] || THREADS=1
if [ ${#NPROC[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # Open MPI refuses root otherwise
fi

quoted() { printf '%q ' "$@" | sed 's/ $//'; }
step() { echo; echo "== $1"; shift; echo "\$ $(quoted "$@")"; "$@"; }
rm -rf "$OUT/ckpt" "$OUT/metrics.jsonl" "$OUT/samples.gif"
mkdir -p "$OUT"
step "generate clips of moving shapes" "$PY" "$HERE/make_data.py" --out "$OUT"
step "export the video DiT with its loss, and the denoiser alone" "$PY" "$HERE/export.py" --out "$OUT" --steps "$STEPS"
echo; cat "$OUT/$SPEC"
step "compile for training" "$OPT" "$OUT/train.onnx" --spec "$OUT/$SPEC" -o "$OUT/train.cplan"

TRAIN=("$RUN" "${NPROC[@]}" "$OUT/train.cplan" train --steps "$STEPS" --metrics "$OUT/metrics.jsonl"
       --save "$OUT/ckpt" --save-every 500 --seed 0 --threads "$THREADS")
echo; echo "== train $STEPS steps (the table is read from $OUT/metrics.jsonl as it grows)"; echo "\$ $(quoted "${TRAIN[@]}")"
"${TRAIN[@]}" 2> "$OUT/train.log" &
PID=$!
"$PY" "$ROOT/examples/train/show_metrics.py" "$OUT/metrics.jsonl" --every 100 --follow "$PID" || true
if ! wait "$PID"; then
  cat "$OUT/train.log" >&2
  echo "run.sh: training failed" >&2
  exit 1
fi
"$PY" - "$OUT/metrics.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
k = max(1, len(rows) // 10)
first, last = (sum(r["loss"] for r in part) / len(part) for part in (rows[:k], rows[-k:]))
if not last < 0.8 * first:
    sys.exit(f"run.sh: the loss did not fall (first steps {first:.3f}, last steps {last:.3f})")
PYEOF

step "sample 8 clips with the compiled denoiser ($SAMPLE_STEPS Euler steps)" \
  "$PY" "$HERE/sample.py" --work "$OUT" --checkpoint "$OUT/ckpt" --steps "$SAMPLE_STEPS" --check-torch \
  --opt "$OPT" --run "$RUN" --threads 2
echo
echo "OK: trained $STEPS steps ($MESH); checkpoint in $OUT/ckpt, metrics in $OUT/metrics.jsonl, samples in $OUT/samples.gif"
