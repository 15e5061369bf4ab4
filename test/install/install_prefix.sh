#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then the README's main example and a dp=2 run with the
# installed tools only, from a folder outside the build and source trees (issue 17, done-when 1).
#
#   install_prefix.sh BUILD_DIR SOURCE_DIR WORKDIR
#
# The prefix and the folder the tools run from are a fresh folder under /tmp (outside both trees),
# removed at the end; the logs are copied to WORKDIR.
# 1. cmake --install BUILD_DIR --prefix /tmp/colossal-install.XXXXXX/prefix
# 2. no installed file names BUILD_DIR or SOURCE_DIR (binaries, RUNPATH, scripts) and the tools
#    have no RUNPATH outside the system's library folders
# 3. every installed runtime API header compiles from the prefix (with LLVM's and protobuf's headers)
# 4. from /tmp/colossal-install.XXXXXX/elsewhere with PATH=PREFIX/bin:/usr/bin:/bin: the installed
#    share/colossal/examples/run_example.sh (150 steps; the loss must fall), which must pick the
#    installed tools from PATH
# 5. the example's model compiled for mesh {dp: 2}, 10 steps under mpirun -np 2 against 10 steps of
#    the one-rank plan: equal losses (1e-5 relative)
set -euo pipefail
BUILD="$(cd "$1" && pwd)" SRC="$(cd "$2" && pwd)" W="$3"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$W"
mkdir -p "$W"
T="$(mktemp -d /tmp/colossal-install.XXXXXX)"
trap 'cp "$T"/*.log "$T"/elsewhere/*.log "$W"/ 2>/dev/null || true; rm -rf "$T"' EXIT
PREFIX="$T/prefix"
mkdir -p "$T/elsewhere"
fail() { echo "FAIL: $*"; exit 1; }

echo "== cmake --install $BUILD --prefix $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" > "$T/install.log" || { cat "$T/install.log"; fail "cmake --install"; }
for f in bin/colossal-opt bin/colossal-run include/colossal/runtime/Plan.h include/colossal/runtime/plan.pb.h \
         share/colossal/examples/run_example.sh share/doc/colossal/README.md share/colossal/plan.proto; do
  [ -e "$PREFIX/$f" ] || fail "$f is not installed"
done
echo "installed: $(find "$PREFIX" -type f | wc -l) files, $(du -sh "$PREFIX" | cut -f1)"

echo "== no path into the build or source tree"
hits=$(grep -rlF -e "$BUILD" -e "$SRC" "$PREFIX" || true)
[ -z "$hits" ] || fail "installed files name the build or source tree: $hits"
for t in "$PREFIX"/bin/*; do
  rp=$(readelf -d "$t" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  echo "$(basename "$t"): RUNPATH '${rp}'"
  IFS=: read -ra dirs <<< "$rp"
  for d in "${dirs[@]}"; do
    case "$d" in ''|/usr/lib/*|/lib/*) ;; *) fail "$t has RUNPATH entry $d outside the system's library folders" ;; esac
  done
done

echo "== the runtime API headers compile from the prefix (c++ -fsyntax-only, LLVM's headers beside)"
for h in "$PREFIX"/include/colossal/runtime/*.h; do echo "#include \"colossal/runtime/$(basename "$h")\""; done > "$T/headers.cpp"
c++ -std=c++17 -fsyntax-only -I"$PREFIX/include" -isystem /usr/lib/llvm-22/include "$T/headers.cpp" \
  || fail "the installed headers do not compile on their own"
echo "$(wc -l < "$T/headers.cpp") headers"

export PATH="$PREFIX/bin:/usr/bin:/bin"
cd "$T/elsewhere"
echo "== $PREFIX/share/colossal/examples/run_example.sh --steps 150 --tokens 60 (from $PWD)"
bash "$PREFIX/share/colossal/examples/run_example.sh" --steps 150 --tokens 60 > example.log 2>&1 \
  || { cat example.log; fail "the installed run_example.sh"; }
grep -qF "\$ $PREFIX/bin/colossal-opt " example.log || { cat example.log; fail "the example did not use the installed colossal-opt"; }
grep -qF "$PREFIX/bin/colossal-run " example.log || { cat example.log; fail "the example did not use the installed colossal-run"; }
tail -4 example.log
EX="$PWD/colossal-example"
[ -d "$EX/ckpt" ] || fail "no checkpoint in $EX/ckpt"

echo "== dp=2 under mpirun with the installed tools"
sed -e 's/total_steps: [0-9]*/total_steps: 10/' -e 's/warmup_steps: [0-9]*/warmup_steps: 2/' "$EX/train.yaml" > one.yaml
{ cat one.yaml; echo "mesh: {dp: 2}"; } > dp2.yaml
colossal-opt "$EX/model/model.onnx" --spec one.yaml -o one.cplan
colossal-opt "$EX/model/model.onnx" --spec dp2.yaml -o dp2.cplan
TRAIN=(train --data "$EX/data/train.bin" --token-dtype uint8 --steps 10 --threads 1)
colossal-run one.cplan "${TRAIN[@]}" --metrics one.jsonl > one.log 2>&1 || { cat one.log; fail "one-rank training"; }
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np 2 --oversubscribe --bind-to none colossal-run dp2.cplan "${TRAIN[@]}" --metrics dp2.jsonl \
  > dp2.log 2>&1 || { cat dp2.log; fail "dp=2 training under mpirun"; }
/usr/bin/python3 "$HERE/compare_losses.py" dp2.jsonl one.jsonl --steps 10 || fail "dp=2 losses differ from one rank's"
echo "OK: installed into $PREFIX; the example and a dp=2 run work from $PWD with the installed tools"
