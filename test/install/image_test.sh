#!/usr/bin/env bash
# The container image (issue 17, done-when 3): scripts/build-image.sh builds it, then
# `docker run IMAGE colossal-run --help` and, inside a container, the python3-onnx example of
# deb_debian12.sh (test/install/onnx_mlp.py) compiled and run on one rank and on dp=2 against NumPy.
#
#   image_test.sh BUILD_DIR WORKDIR
#
# The Docker daemon: the one `docker info` reaches, else one this test starts (Debian's docker.io
# dockerd, data under BUILD_DIR/docker, its own socket, no bridge or iptables) and stops on any exit.
# Exit 77 (ctest: Skipped) with the reason when no daemon can run here: dockerd not installed, or
# it does not come up within 60 s (its log's last lines are printed).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (dockerd, debootstrap)"; exit 77; }
for t in debootstrap cpack dpkg-deb; do
  command -v "$t" > /dev/null || { echo "skipped: $t is not on PATH (scripts/install-deps.sh)"; exit 77; }
done
BUILD="$(cd "$1" && pwd)" W="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../.." && pwd)"
rm -rf "$W"
mkdir -p "$W"
DAEMON_PID=""
stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  kill "$DAEMON_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$DAEMON_PID" 2>/dev/null || true
  local m  # dockerd leaves its network namespace mounted under the exec root
  for m in $(awk -v r="$EXEC_ROOT/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" || true; done
  rm -rf --one-file-system "$EXEC_ROOT" "$SOCK" || true
}
trap stop_daemon EXIT

if docker info > /dev/null 2>&1; then
  echo "== the Docker daemon that docker info reaches ($(docker info --format '{{.ServerVersion}}'))"
elif command -v dockerd > /dev/null; then
  SOCK="/tmp/colossal-dockerd.$$.sock" EXEC_ROOT="/tmp/colossal-dockerd.$$"
  # A daemon of an earlier run that was killed before its cleanup (ctest's timeout) holds the data.
  old=$(cat "$BUILD/docker.pid" 2>/dev/null || true)
  if [ -n "$old" ] && tr '\0' ' ' < "/proc/$old/cmdline" 2>/dev/null | grep -qF -- "--data-root $BUILD/docker "; then
    kill "$old" || true
    for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.2; done
  fi
  echo "== starting dockerd ($SOCK, data in $BUILD/docker)"
  dockerd --data-root "$BUILD/docker" --exec-root "$EXEC_ROOT" --pidfile "$BUILD/docker.pid" -H "unix://$SOCK" \
    --bridge none --iptables=false > "$W/dockerd.log" 2>&1 &
  DAEMON_PID=$!
  export DOCKER_HOST="unix://$SOCK"
  for _ in $(seq 120); do
    docker info > /dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info > /dev/null 2>&1; then
    tail -15 "$W/dockerd.log"
    echo "SKIPPED: no Docker daemon can run here: dockerd did not come up (log above, $W/dockerd.log)"
    exit 77
  fi
  echo "dockerd $(docker info --format '{{.ServerVersion}}') is up (storage driver $(docker info --format '{{.Driver}}'))"
else
  echo "SKIPPED: no Docker daemon can run here: none answers docker info and dockerd is not installed (docker.io)"
  exit 77
fi

TAG="colossal:image-test"
t0=$(date +%s)
bash "$SRC/scripts/build-image.sh" --build "$BUILD" --tag "$TAG"
echo "image built in $(( $(date +%s) - t0 )) s: $(docker image inspect "$TAG" --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"

echo "== docker run --rm $TAG colossal-run --help"
docker run --rm --network none "$TAG" colossal-run --help > "$W/help.log" 2>&1 || { cat "$W/help.log"; echo "FAIL: colossal-run --help in the image"; exit 1; }
head -3 "$W/help.log"
grep -q "OVERVIEW: colossal-run" "$W/help.log" || { echo "FAIL: no colossal-run help"; exit 1; }

echo "== the python3-onnx example in a container"
docker run --rm --network none -v "$HERE:/tests:ro" "$TAG" bash -euxc '
  python3 /tests/onnx_mlp.py make --out mlp
  colossal-opt mlp/model.onnx --spec mlp/spec.yaml -o mlp/model.cplan
  colossal-run mlp/model.cplan --input x=mlp/x.npy --output-dir out --threads 1
  python3 /tests/onnx_mlp.py check out/probs.npy mlp/reference.npy
  colossal-opt mlp/model.onnx --spec mlp/spec_dp2.yaml -o mlp/model_dp2.cplan
  mpirun -np 2 --oversubscribe colossal-run mlp/model_dp2.cplan --input x=mlp/x.npy --output-dir out_dp2 --threads 1
  python3 /tests/onnx_mlp.py check out_dp2/probs.npy mlp/reference.npy' 2>&1 | tee "$W/example.log" \
  || { echo "FAIL: the example in the image"; exit 1; }
echo "OK: $TAG built from the Debian archive; colossal-run --help and the example ran in containers ($(( $(date +%s) - t0 )) s)"
