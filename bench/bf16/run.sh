#!/usr/bin/env bash
# bf16 mixed precision against fp32 (issue 13 "Done when" 5), with PyTorch measured in the same run:
#   1. GEMM: the runtime's matmul kernel with bf16 operands (f32 result) against the same kernel in
#      f32 (oneDNN's dnnl_sgemm, the fp32 GEMM the runtime uses), and oneDNN 2.6's own bf16 matmul
#      primitive (runtime/bench/bf16_gemm_bench.cpp); torch.matmul in fp32 and bf16 on the same shapes.
#   2. Training tokens/s on the nanoGPT character model (examples/train/train_nanogpt_char.yaml: 6
#      layers, d_model 384, 6 heads, T 256, B 8): colossal-run fp32 and `precision: {compute: bf16}`,
#      PyTorch fp32 and torch.autocast("cpu", bfloat16) (examples/train/torch_reference.py).
#
#   bench/bf16/run.sh [--threads N] [--steps N] [--warmup N] [--rounds N] [--work DIR] [--data TEXT]
#                     [--gemm-only | --train-only]
#
# Defaults: threads = nproc, 2 rounds of 12 steps (first 2 untimed), work directory build/bench/bf16,
# data ../shared/data/tinyshakespeare.txt (else /usr/share/common-licenses). Needs build/bin tools and
# `ninja -C build colossal-bf16-gemm-bench`. In each training round the four runs follow each other
# (torch fp32, torch bf16, colossal fp32, colossal bf16) so a drifting load affects all; the summary
# takes each one's median round. tokens/s = B*T*steps / the summed wall time of the timed steps, from
# the metrics lines (bench/train_gpt/compare.py's definition). Before timing, colossal fp32 must match
# PyTorch fp32 within 1e-3 over the first 5 steps and colossal bf16 match colossal fp32 within 5e-3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=/usr/bin/python3
THREADS="$(nproc)" STEPS=12 WARMUP=2 ROUNDS=2 WORK="$ROOT/build/bench/bf16" PART=all
DATA="$ROOT/../shared/data/tinyshakespeare.txt"
[ -f "$DATA" ] || DATA=/work/shared/data/tinyshakespeare.txt
CMDLINE="bench/bf16/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --gemm-only) PART=gemm; shift ;;
    --train-only) PART=train; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
OPT="$ROOT/build/bin/colossal-opt" RUN="$ROOT/build/bin/colossal-run" GEMM="$ROOT/build/runtime/colossal-bf16-gemm-bench"
for t in "$OPT" "$RUN"; do [ -x "$t" ] || { echo "run.sh: $t not found (scripts/build.sh)" >&2; exit 2; }; done
if [ "$PART" != train ] && [ ! -x "$GEMM" ]; then
  echo "run.sh: $GEMM not found (ninja -C build colossal-bf16-gemm-bench)" >&2; exit 2
fi
[ -f "$DATA" ] || DATA=/usr/share/common-licenses
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs;" \
     "flags: $(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== torch: $("$PY" -c 'import torch; print(torch.__version__, "| mkldnn:", torch.backends.mkldnn.is_available())' 2>/dev/null)"
echo "== threads: $THREADS; load average before: $(load)"
mkdir -p "$WORK"

if [ "$PART" != train ]; then
  echo
  echo "-- GEMM (row-major [M,K]·[K,N], median of 15 runs)"
  echo "\$ $GEMM 15"
  "$GEMM" 15
  echo "\$ torch.matmul fp32 vs bf16, same shapes"
  "$PY" - "$THREADS" <<'PYEOF'
import sys, time, torch
threads = int(sys.argv[1])
shapes = [(2048, 384, 1152), (2048, 384, 384), (2048, 384, 1536), (2048, 1536, 384), (2048, 384, 256)]
print(f"{'M x K x N':18s} thr  torch f32 GF/s  torch bf16 GF/s  ratio")
def med(fn, runs=15):
    fn(); ts = []
    for _ in range(runs):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]
for m, k, n in shapes:
    for t in sorted({1, threads}):
        torch.set_num_threads(t)
        a, b = torch.randn(m, k), torch.randn(k, n)
        ab, bb = a.bfloat16(), b.bfloat16()
        f = med(lambda: torch.matmul(a, b)); h = med(lambda: torch.matmul(ab, bb))
        fl = 2.0 * m * n * k
        print(f"{m:5d} x {k:4d} x {n:4d} {t:3d} {fl / f / 1e9:15.1f} {fl / h / 1e9:16.1f} {f / h:6.2f}")
PYEOF
  echo "load average after the GEMMs: $(load)"
fi

if [ "$PART" != gemm ]; then
  echo
  echo "-- training, nanoGPT char model"
  SPEC32="$ROOT/examples/train/train_nanogpt_char.yaml" SPEC16="$WORK/train_nanogpt_char_bf16.yaml"
  { cat "$SPEC32"; echo "precision: {compute: bf16}"; } > "$SPEC16"
  "$PY" "$ROOT/examples/models/export.py" --preset nanogpt-char --out "$WORK/model" --quiet
  if [ -d "$DATA" ]; then TEXTS=("$DATA"/*); else TEXTS=("$DATA"); fi
  "$PY" "$ROOT/examples/train/prepare_data.py" "${TEXTS[@]}" --out "$WORK/data" | sed 's/^/   /'
  for p in fp32:"$SPEC32" bf16:"$SPEC16"; do
    echo "\$ $OPT $WORK/model/model.onnx --spec ${p#*:} -o $WORK/${p%%:*}.cplan"
    "$OPT" "$WORK/model/model.onnx" --spec "${p#*:}" -o "$WORK/${p%%:*}.cplan"
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    for p in fp32:"$SPEC32" bf16:"$SPEC16"; do
      name="${p%%:*}"
      echo "\$ torch_reference.py --spec ${p#*:} --steps $STEPS --threads $THREADS --metrics $WORK/torch_$name.$round.jsonl"
      "$PY" "$ROOT/examples/train/torch_reference.py" --model-dir "$WORK/model" --spec "${p#*:}" \
        --data "$WORK/data/train.bin" --steps "$STEPS" --threads "$THREADS" --metrics "$WORK/torch_$name.$round.jsonl"
    done
    for name in fp32 bf16; do
      echo "\$ $RUN $WORK/$name.cplan train --steps $STEPS --threads $THREADS --metrics $WORK/colossal_$name.$round.jsonl"
      "$RUN" "$WORK/$name.cplan" train --data "$WORK/data/train.bin" --token-dtype uint8 --steps "$STEPS" \
        --threads "$THREADS" --metrics "$WORK/colossal_$name.$round.jsonl" 2> "$WORK/colossal_$name.$round.log" ||
        { cat "$WORK/colossal_$name.$round.log" >&2; exit 1; }
    done
    echo "load average after round $round: $(load)"
  done
  "$PY" - "$WORK" "$ROUNDS" "$WARMUP" "$THREADS" <<'PYEOF'
import json, statistics, sys
work, rounds, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tok = 8 * 256
def load(p):
    with open(p) as f:
        return [json.loads(l) for l in f if l.strip()]
def tps(rows):
    timed = rows[warmup:]
    return tok * len(timed) / sum(tok / r["tokens_per_s"] for r in timed)
runs = {k: [load(f"{work}/{k}.{r}.jsonl") for r in range(1, rounds + 1)]
        for k in ("torch_fp32", "torch_bf16", "colossal_fp32", "colossal_bf16")}
def maxrel(a, b, n=5):
    return max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a[:n], b[:n]))
d32 = maxrel(runs["colossal_fp32"][0], runs["torch_fp32"][0])
d16 = maxrel(runs["colossal_bf16"][0], runs["colossal_fp32"][0])
dt16 = maxrel(runs["colossal_bf16"][0], runs["torch_bf16"][0])
print(f"first 5 steps, max relative loss difference: colossal fp32 vs torch fp32 {d32:.1e}; "
      f"colossal bf16 vs colossal fp32 {d16:.1e}; colossal bf16 vs torch bf16 {dt16:.1e}")
if d32 > 1e-3 or d16 > 5e-3:
    sys.exit("run.sh: the losses disagree: not timing a wrong run")
med = {k: statistics.median(tps(r) for r in v) for k, v in runs.items()}
print(f"\nnanoGPT char training, B 8 x T 256, {threads} threads, {rounds} round(s) of "
      f"{len(runs['torch_fp32'][0])} steps, first {warmup} untimed; median round")
print("| engine | fp32 tokens/s | bf16 tokens/s | bf16 / fp32 |")
print("|---|---:|---:|---:|")
for e, label in (("colossal", "colossal-run"), ("torch", "PyTorch")):
    a, b = med[f"{e}_fp32"], med[f"{e}_bf16"]
    print(f"| {label} | {a:.0f} | {b:.0f} | {b / a:.2f} |")
print(f"| colossal / PyTorch | {med['colossal_fp32'] / med['torch_fp32']:.2f} | "
      f"{med['colossal_bf16'] / med['torch_bf16']:.2f} | |")
PYEOF
fi
echo "load average after: $(load)"
