#!/usr/bin/env bash
# Runs the whole test suite: GoogleTest unit tests, lit tests and end-to-end tests (ctest).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${COLOSSAL_BUILD_DIR:-$ROOT/build}"
cd "$BUILD"
ctest --output-on-failure -j"${JOBS:-$(nproc)}" "$@"
