#!/usr/bin/env bash
# Data parallelism on this machine: step time and time in communication of the GPT-2 training preset
# (examples/models/export.py --preset gpt2-train: 2 layers, d_model 128, 4 heads, T 64, vocab 256;
# examples/train/train_gpt2.yaml: B 8, AdamW) trained with `mesh: {dp: 2}` on 2 ranks against the same
# spec without a mesh on one rank. Same global batch (8 rows) and data order, so the losses agree.
#
#   bench/train_dp/run.sh [--steps N] [--warmup N] [--dp D] [--work DIR] [--opt PATH] [--run PATH]
#
# Runs: one rank --threads 1, one rank --threads D, and dp=D (colossal-run --nproc D, --threads 1
# per rank). On a machine with D cores the fair pair is "one rank, D threads" vs "dp=D, 1 thread
# each": both use every core. Step time is B*T / tokens_per_s of each metrics line (the step's wall
# time: train_step runs and optimizer_step, waits included; no start-up or loading); comm_s is the
# metrics' wall time inside collectives on rank 0 (gradient all_reduces and the loss reduction,
# including waiting for the slower rank). Mean over the steps after --warmup.
# Defaults: 30 steps, 5 untimed, dp 2, work directory build/bench/train_dp.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
STEPS=30 WARMUP=5 DP=2 WORK="$ROOT/build/bench/train_dp"
OPT="${COLOSSAL_OPT:-}" RUN="${COLOSSAL_RUN:-}"
CMDLINE="bench/train_dp/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --dp) DP="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$STEPS" -gt "$WARMUP" ] || { echo "run.sh: --steps must exceed --warmup" >&2; exit 2; }
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
OPT="$(pick "$OPT" "$ROOT/build/bin/colossal-opt" "$(command -v colossal-opt || true)")"
RUN="$(pick "$RUN" "$ROOT/build/bin/colossal-run" "$ROOT/build-rt/bin/colossal-run" "$(command -v colossal-run || true)")"
[ -n "$OPT" ] || { echo "run.sh: colossal-opt not found (build it, or pass --opt)" >&2; exit 2; }
[ -n "$RUN" ] || { echo "run.sh: colossal-run not found (build it, or pass --run)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "run.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs online;" \
     "$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1) cores/socket," \
     "$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1) threads/core; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== $(mpirun --version 2>/dev/null | head -1)"
echo "== tools: $OPT, $RUN; $STEPS steps, first $WARMUP untimed"

mkdir -p "$WORK"
"$PY" "$ROOT/examples/models/export.py" --preset gpt2-train --out "$WORK/model" --quiet
DATA_IN=("$ROOT/../shared/data/tinyshakespeare.txt")
[ -f "${DATA_IN[0]}" ] || DATA_IN=(/work/shared/data/tinyshakespeare.txt)
[ -f "${DATA_IN[0]}" ] || DATA_IN=(/usr/share/common-licenses/*)
"$PY" "$ROOT/examples/train/prepare_data.py" "${DATA_IN[@]}" --out "$WORK/data" >/dev/null
SPEC1="$ROOT/examples/train/train_gpt2.yaml"
SPECD="$WORK/train_gpt2_dp$DP.yaml"
{ cat "$SPEC1"; echo "mesh: {dp: $DP}"; } > "$SPECD"
"$OPT" "$WORK/model/model.onnx" --spec "$SPEC1" -o "$WORK/one.cplan"
"$OPT" "$WORK/model/model.onnx" --spec "$SPECD" -o "$WORK/dp$DP.cplan"

train() {  # name plan nproc threads
  local m="$WORK/$1.jsonl"
  rm -f "$m"
  local cmd=("$RUN" "$2" train --data "$WORK/data/train.bin" --token-dtype uint8 --steps "$STEPS"
             --metrics "$m" --threads "$4")
  [ "$3" -gt 1 ] && cmd+=(--nproc "$3")
  echo "\$ ${cmd[*]}"
  "${cmd[@]}"
}
train one_t1 "$WORK/one.cplan" 1 1
train "one_t$DP" "$WORK/one.cplan" 1 "$DP"
train "dp$DP" "$WORK/dp$DP.cplan" "$DP" 1

"$PY" - "$WORK" "$WARMUP" "$DP" <<'PYEOF'
import json, sys
work, warmup, dp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokens = 8 * 64
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
runs = {"1 rank, 1 thread": load("one_t1"), f"1 rank, {dp} threads": load(f"one_t{dp}"),
        f"dp={dp}, 1 thread/rank": load(f"dp{dp}")}
ref = runs["1 rank, 1 thread"]
for name, rows in runs.items():
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(rows, ref))
    if worst > 1e-5:
        sys.exit(f"{name}: losses differ from one rank by {worst:.2e} (relative): not the same training")
print(f"\nlosses agree (relative difference <= 1e-5 on all {len(ref)} steps); "
      f"mean over steps {warmup}..{len(ref) - 1}:")
print(f"{'run':24s} {'step ms':>8s} {'comm ms':>8s} {'comm %':>7s} {'tokens/s':>9s}")
res = {}
for name, rows in runs.items():
    t = rows[warmup:]
    step = sum(tokens / r["tokens_per_s"] for r in t) / len(t)
    comm = sum(r.get("comm_s", 0) for r in t) / len(t)
    res[name] = step
    print(f"{name:24s} {step * 1e3:8.1f} {comm * 1e3:8.2f} {100 * comm / step:6.1f}% {tokens / step:9.0f}")
d = res[f"dp={dp}, 1 thread/rank"]
print(f"speed-up of dp={dp} over 1 rank/1 thread: {res['1 rank, 1 thread'] / d:.2f}x; "
      f"over 1 rank/{dp} threads: {res[f'1 rank, {dp} threads'] / d:.2f}x")
PYEOF
