#!/usr/bin/env bash
# Serving benchmark, benchmark_serving style: colossal-run's generate engine in-process and behind
# its OpenAI-compatible server, against llama.cpp (f32 exact and its defaults) and onnxruntime
# (a KV-cache decode loop), on the same random-token prompts, greedy, end of sequence ignored,
# the same thread count for every system.
#
#   bench/serve/run.sh [--quick] [--threads N] [--models "aidreams260K llama15m llama100m"]
#                      [--concurrency "1 2 4 8"] [--rounds N] [--prompt-len N] [--max-tokens N]
#                      [--work DIR] [--no-http] [--no-ort] [--opt PATH] [--run PATH] [--check]
#
# Defaults: 2 threads, all three models, concurrency 1 2 4 8, 1 round of C requests per
# concurrency C after an untimed warm-up round, 128-token prompts, 128 output tokens (aidreams260K,
# trained on 128 positions: 64 + 64), work directory build/bench/serve. --quick: aidreams260K and
# llama15m, concurrency 1 and 8, 1 round, 32 output tokens. --check (the ctest bench.serve.greedy):
# exit 77 (skipped) instead of installing node-llama-cpp when it is absent, or without a C++
# compiler or the shared model.
# Tools: --opt/--run, else $COLOSSAL_OPT/$COLOSSAL_RUN, else build/bin. llama.cpp is the prebuilt
# linux-x64 libllama of node-llama-cpp (pinned below; from third_party/npm, else installed into
# the work directory); bench/serve/llama_harness.cpp is compiled against it with the system
# compiler and the llama.h of the release the package carries (its git bundle). onnxruntime is
# onnxruntime-node from third_party/npm. Every measurement first checks its greedy tokens against
# colossal's: llama.cpp f32 must equal them (the run stops otherwise); the others are reported.
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as the environment sets them (shared/TOOLCHAIN.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/serve"
PY=/usr/bin/python3
NODE="${NODE:-node}"
CXX="${CXX:-g++}"
NLC_VERSION=3.21.1
THREADS=2 MODELS="aidreams260K llama15m llama100m" CONC="1 2 4 8" ROUNDS=1 PROMPT_LEN=128 MAX_TOKENS=128
WORK="$ROOT/build/bench/serve" HTTP=1 ORT=1 CHECK=0
OPT="${COLOSSAL_OPT:-}" RUN="${COLOSSAL_RUN:-}"
CMDLINE="bench/serve/run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) MODELS="aidreams260K llama15m" CONC="1 8" ROUNDS=1 MAX_TOKENS=32; shift ;;
    --threads) THREADS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --prompt-len) PROMPT_LEN="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --no-http) HTTP=0; shift ;;
    --no-ort) ORT=0; shift ;;
    --check) CHECK=1; shift ;;
    --opt) OPT="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
pick() { for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done; }
OPT="$(pick "$OPT" "$ROOT/build/bin/colossal-opt")"
RUN="$(pick "$RUN" "$ROOT/build/bin/colossal-run")"
[ -n "$OPT" ] && [ -n "$RUN" ] || { echo "run.sh: colossal-opt / colossal-run not found (build, or --opt/--run)" >&2; exit 2; }
skip() { echo "SKIPPED: $*"; exit 77; }
if [ "$CHECK" = 1 ]; then
  command -v "$CXX" >/dev/null || skip "no C++ compiler ($CXX)"
  case " $MODELS " in *" aidreams260K "*)
    [ -f "$ROOT/../shared/models/aidreams260K/checkpoint.bin" ] || skip "the shared model ../shared/models/aidreams260K is absent" ;;
  esac
fi
mkdir -p "$WORK"
T_START=$(date +%s)

echo "== command: $CMDLINE"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) CPUs online;" \
     "$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1) cores/socket," \
     "$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1) threads/core"
echo "== load before the run: $(uptime)"
echo "== git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== tools: $OPT, $RUN; $THREADS threads for every system"

# --- llama.cpp: node-llama-cpp's prebuilt libraries, the harness compiled against them ---
NLC=""
for d in "$ROOT/third_party/npm" "$WORK/npm" "$ROOT/build/bench/serve/npm"; do
  [ -f "$d/node_modules/node-llama-cpp/package.json" ] && { NLC="$d"; break; }
done
if [ -z "$NLC" ]; then
  [ "$CHECK" = 0 ] || skip "node-llama-cpp is not in third_party/npm (scripts/install-deps.sh)"
  NLC="$WORK/npm"
  mkdir -p "$NLC"
  [ -f "$NLC/package.json" ] || echo '{"name":"colossal-bench-serve","private":true}' > "$NLC/package.json"
  echo "\$ (cd $NLC && npm i -E node-llama-cpp@$NLC_VERSION --ignore-scripts)"
  (cd "$NLC" && npm i -E "node-llama-cpp@$NLC_VERSION" --ignore-scripts --no-audit --no-fund >/dev/null)
fi
LIBDIR="$NLC/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
BUNDLE="$NLC/node_modules/node-llama-cpp/llama/gitRelease.bundle"
echo "== llama.cpp: node-llama-cpp $(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$NLC/node_modules/node-llama-cpp/package.json" | head -1), release" \
     "$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$NLC/node_modules/node-llama-cpp/llama/llama.cpp.info.json")," \
     "libraries $LIBDIR"
HARNESS="$WORK/llama_harness"
if [ ! -x "$HARNESS" ] || [ "$HERE/llama_harness.cpp" -nt "$HARNESS" ]; then
  SRC="$WORK/llama-src" INC="$WORK/llama-include"
  rm -rf "$SRC" "$INC" && git init -q "$SRC" && mkdir -p "$INC"
  git -C "$SRC" fetch -q "$BUNDLE" HEAD
  for h in include/llama.h ggml/include/{ggml,ggml-backend,ggml-cpu,ggml-alloc,ggml-opt,gguf}.h; do
    git -C "$SRC" show "FETCH_HEAD:$h" > "$INC/$(basename "$h")"
  done
  COMPILE=("$CXX" -O2 -std=c++17 -I "$INC" "$HERE/llama_harness.cpp" -o "$HARNESS"
           "$LIBDIR/libllama.v0.4.0.so" "$LIBDIR/libggml.v0.4.0.so" "$LIBDIR/libggml-base.so" "-Wl,-rpath,$LIBDIR")
  echo "\$ ${COMPILE[*]}"
  "${COMPILE[@]}"
fi
echo "== onnxruntime-node: $(cd "$ROOT/third_party/npm" && "$NODE" -p "require('onnxruntime-node/package.json').version" 2>/dev/null || echo 'absent')"

# --- per model: the workload, the plan, then every system at every concurrency ---
SERVER_PID=""
stop_server() { [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""; }
trap stop_server EXIT
for M in $MODELS; do
  P=$PROMPT_LEN N=$MAX_TOKENS
  if [ "$M" = aidreams260K ] && [ $((P + N)) -gt 128 ]; then P=64 N=$((N < 64 ? N : 64)); fi
  D="$WORK/$M"
  echo
  echo "== $M (prompts $P tokens, $N output tokens)"
  PREP=("$PY" "$HERE/prepare.py" --model "$M" --work "$WORK" --prompt-len "$P" --max-tokens "$N"
        --concurrency "$CONC" --rounds "$ROUNDS")
  echo "\$ ${PREP[*]}"
  "${PREP[@]}"
  TOK=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokenizer'])" "$D/info.json")
  COMPILE=("$OPT" "$D/model.onnx" --spec "$D/spec.yaml" -o "$D/model.cplan")
  echo "\$ ${COMPILE[*]}"
  "${COMPILE[@]}"
  if [ "$ORT" = 1 ]; then
    EXPORT=("$PY" "$HERE/export_kv.py" --work "$D")
    echo "\$ ${EXPORT[*]}"
    "${EXPORT[@]}"
  fi
  if [ "$HTTP" = 1 ]; then
    SERVE=("$RUN" "$D/model.cplan" serve --tokenizer "$TOK" --port 0 --quiet --model-name "$M" --threads "$THREADS")
    echo "\$ ${SERVE[*]} &"
    "${SERVE[@]}" > "$D/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 300); do grep -qs "^listening on" "$D/server.log" && break; sleep 0.1; done
    URL=$(sed -n 's/^listening on //p' "$D/server.log")
    [ -n "$URL" ] || { echo "run.sh: the server did not start:" >&2; cat "$D/server.log" >&2; exit 1; }
  fi
  for C in $CONC; do
    F="$D/c$C"
    mkdir -p "$F"
    GEN=("$RUN" "$D/model.cplan" generate --requests "$D/requests-c$C.jsonl" --output "$F/colossal.jsonl"
         --timings "$F/colossal.json" --max-batch-seqs "$C" --threads "$THREADS")
    echo "\$ ${GEN[*]}"
    "${GEN[@]}" 2> "$F/colossal.log" || { cat "$F/colossal.log" >&2; exit 1; }
    sed 's/^/   /' "$F/colossal.log"
    if [ "$HTTP" = 1 ]; then
      CLIENT=("$NODE" "$HERE/http_client.cjs" --url "$URL" --model "$M" --requests "$D/requests-c$C.jsonl"
              --concurrency "$C" --timings "$F/colossal-http.json" --npm "$ROOT/third_party/npm")
      echo "\$ ${CLIENT[*]}"
      "${CLIENT[@]}"
    fi
    for CFG in exact default; do
      LL=("$HARNESS" --model "$D/model-f32.gguf" --lib-dir "$LIBDIR" --threads "$THREADS"
          --requests "$D/llama-c$C.txt" --config "$CFG" --timings "$F/llama-$CFG.json")
      echo "\$ ${LL[*]}"
      "${LL[@]}" 2> "$F/llama-$CFG.log" || { cat "$F/llama-$CFG.log" >&2; exit 1; }
    done
    if [ "$ORT" = 1 ]; then
      ORTRUN=("$NODE" "$HERE/ort_decode.cjs" --model "$D/model-kv.onnx" --info "$D/model-kv.json"
              --requests "$D/requests-c$C.jsonl" --concurrency "$C" --threads "$THREADS" --timings "$F/ort.json"
              --npm "$ROOT/third_party/npm")
      echo "\$ ${ORTRUN[*]}"
      "${ORTRUN[@]}"
    fi
    "$PY" "$HERE/report.py" --check-greedy "$F" | sed 's/^/   /' || { echo "run.sh: llama.cpp f32 greedy tokens differ from colossal's ($F)" >&2; exit 1; }
  done
  stop_server
done

echo
echo "Serving: $THREADS thread(s); concurrency $CONC; $ROUNDS round(s) per concurrency; load after the run: $(uptime | sed 's/.*load average/load average/')"
"$PY" "$HERE/report.py" --work "$WORK" --models "$MODELS" --concurrency "$CONC" | tee "$WORK/report.md"
echo
echo "== done in $(( $(date +%s) - T_START )) s"
