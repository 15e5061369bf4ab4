#!/usr/bin/env bash
# Data and tensor parallelism on this machine: step time and time in communication of the GPT-2
# training preset (examples/models/export.py --preset gpt2-train: 2 layers, d_model 128, 4 heads,
# T 64, vocab 256; examples/train/train_gpt2.yaml: B 8, AdamW) on one rank, with `mesh: {dp: N}`, with
# `mesh: {tp: N}` and with sequence-parallel tp=N on N ranks, and PyTorch from the same weights and data
# order. Same global batch (8 rows) and data order, so the losses agree (checked before timing).
#
#   bench/train_dp/run.sh [--steps N] [--warmup N] [--rounds R] [--n N] [--configs LIST]
#                         [--work DIR] [--opt PATH] [--run PATH]
#
# Configs (--configs, comma-separated; default one1,oneN,dp,tp,sp,torch): one rank --threads 1, one
# rank --threads N, dp=N / tp=N / sequence-parallel tp=N (colossal-run --nproc N, --threads 1 per
# rank), PyTorch with N threads (torch1: 1 thread). On a machine with N cores the fair pair is "one
# rank, N threads" vs "N ranks, 1 thread each": both use every core. Rounds alternate the configs.
# Step time is B*T / tokens_per_s of each metrics line (no start-up or loading); comm is the metrics'
# comm_s (rank 0's wall time inside collectives, waits for the slower rank included). Medians over the
# steps after --warmup of all rounds (bench/train_dp/bench.py). --dp N is an old name of --n N.
# Defaults: 30 steps, 5 untimed, 1 round, N 2, work directory build/bench/train_dp. Exit 77 without mpirun.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
STEPS=30 WARMUP=5 DP=2 ROUNDS=1 CONFIGS=one1,oneN,dp,tp,sp,torch WORK="$ROOT/build/bench/train_dp"
OPT="${COLOSSAL_OPT:-}" RUN="${COLOSSAL_RUN:-}"
CMDLINE="bench/train_dp/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --dp|--n) DP="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --configs) CONFIGS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$STEPS" -gt "$WARMUP" ] || { echo "run.sh: --steps must exceed --warmup" >&2; exit 2; }
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
OPT="$(pick "$OPT" "$ROOT/build/bin/colossal-opt" "$(command -v colossal-opt || true)")"
RUN="$(pick "$RUN" "$ROOT/build/bin/colossal-run" "$ROOT/build-rt/bin/colossal-run" "$(command -v colossal-run || true)")"
[ -n "$OPT" ] || { echo "run.sh: colossal-opt not found (build it, or pass --opt)" >&2; exit 2; }
[ -n "$RUN" ] || { echo "run.sh: colossal-run not found (build it, or pass --run)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "run.sh: mpirun not found (openmpi-bin); skipped" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs online;" \
     "$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1) cores/socket," \
     "$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1) threads/core; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== $(mpirun --version 2>/dev/null | head -1)"
echo "== tools: $OPT, $RUN; $STEPS steps, first $WARMUP untimed; $ROUNDS round(s) of $CONFIGS"

exec "$PY" "$ROOT/bench/train_dp/bench.py" --opt "$OPT" --run "$RUN" --work "$WORK" --steps "$STEPS" \
  --warmup "$WARMUP" --rounds "$ROUNDS" --n "$DP" --configs "$CONFIGS"
