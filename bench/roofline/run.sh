#!/usr/bin/env bash
# Roofline of the transformer benchmarks: how fast the FMA units allow bench/gpt_forward's forward
# and bench/train_gpt's training step to be, next to the peers' measured times.
#
#   bench/roofline/run.sh [--threads N] [--ort-b1 MS] [--ort-b8 MS] [--torch-step MS] [--work DIR]
#
# 1. fma_peak.cpp: the f32 FMA throughput of this CPU (12 independent FMA chains per thread, best of
#    5), 1 thread and N (default 2).
# 2. gemm_rates.cpp: oneDNN's sgemm (the runtime's GEMM) on the models' products, as GFLOP/s.
# 3. The models' FLOPs by formula (d 384, 6 layers, T 256, vocab 256, MLP 4d, causal attention):
#    forward per sequence = T·L·24d² (q, k, v, output and MLP projections) + 2·T·d·V (the head)
#    + L·2·T·(T+1)·d (q·kᵀ and P·v over the causal half); a training step of B = 8 = 3× the
#    projections and head (forward, input and weight gradients) + 3.5× the attention (forward;
#    the backward recomputes q·kᵀ and forms dP, dV, dQ, dK). The minimum time of each is FLOPs /
#    the N-thread peak: no program can be faster on this CPU in f32.
# With --ort-b1/--ort-b8 (onnxruntime's medians from bench/gpt_forward, the same session) and
# --torch-step (PyTorch's ms per step from bench/train_gpt), it prints what share of the peak a
# 1.25× (forward) or 3× (training) lead would need over the whole program.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/roofline"
THREADS=2 ORT1="" ORT8="" TORCH="" WORK="$ROOT/build/bench/roofline"
CMDLINE="bench/roofline/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --ort-b1) ORT1="$2"; shift 2 ;;
    --ort-b8) ORT8="$2"; shift 2 ;;
    --torch-step) TORCH="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$WORK"
echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs; flags: $(grep -o -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
g++ -O3 -march=native -std=c++17 -o "$WORK/fma_peak" "$HERE/fma_peak.cpp" -lpthread
g++ -O2 -std=c++17 -o "$WORK/gemm_rates" "$HERE/gemm_rates.cpp" -ldnnl
PEAKS="$("$WORK/fma_peak" "$THREADS")"
echo "$PEAKS"
# The widest vectors' N-thread figure (AVX-512 where the CPU has it: the first line).
PEAK="$(echo "$PEAKS" | head -1 | sed -n "s/.*$THREADS threads \([0-9.]*\) GFLOP\/s.*/\1/p")"
echo
OMP_NUM_THREADS="$THREADS" "$WORK/gemm_rates"
echo
/usr/bin/python3 - "$PEAK" "$ORT1" "$ORT8" "$TORCH" <<'PY'
import sys
peak = float(sys.argv[1])
ort1, ort8, torch = (float(a) if a else None for a in sys.argv[2:5])
d, L, T, V, B = 384, 6, 256, 256, 8
proj = T * L * 24 * d * d          # per sequence
head = 2 * T * d * V
attn = L * 2 * T * (T + 1) * d
fwd = proj + head + attn
step = B * (3 * (proj + head) + 3.5 * attn)
print(f"peak ({sys.argv[1]} GFLOP/s at the given threads): f32 FLOPs and the least time they take")
print("| program | GFLOP | minimum ms at the peak | peer ms | lead asked | share of the peak it needs |")
print("|---|---:|---:|---:|---:|---:|")
for name, flops, peer, lead in [("forward, batch 1", fwd, ort1, 1.25), ("forward, batch 8", 8 * fwd, ort8, 1.25),
                                ("training step, B 8", step, torch, 3.0)]:
    t = flops / peak / 1e6
    if peer:
        need = peer / lead
        print(f"| {name} | {flops / 1e9:.2f} | {t:.1f} | {peer:.1f} | {lead:.2f}x: <= {need:.1f} ms | {100 * t / need:.0f}% |")
    else:
        print(f"| {name} | {flops / 1e9:.2f} | {t:.1f} | - | - | - |")
PY
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
