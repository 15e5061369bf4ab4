#!/usr/bin/env bash
# Builds a container image with Colossal installed, from the Debian archive alone (no image
# registry): a Debian 12 base made by debootstrap (scripts/debian-base.sh, cached) is imported with
# `docker import`, then the Debian packages of this build (cpack -G DEB) are installed on it by apt.
#
#   scripts/build-image.sh [--tag TAG] [--build DIR]     # TAG default colossal:VERSION, DIR build/
#   docker run --rm TAG colossal-run --help
#
# The image has colossal-run, colossal-opt, mpirun, python3-onnx and python3-numpy; its working
# directory is /work and OMPI_ALLOW_RUN_AS_ROOT is set (a container runs as root). Needs root, a
# Docker daemon this user can reach (docker info; DOCKER_HOST is honoured), debootstrap and the
# Debian mirror (docs/install.md "Container image").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${COLOSSAL_BUILD_DIR:-$ROOT/build}" TAG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BUILD="$(cd "$BUILD" && pwd)"
[ -f "$BUILD/CPackConfig.cmake" ] || { echo "build-image.sh: $BUILD is not a configured build folder (scripts/build.sh)" >&2; exit 2; }
VERSION=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$BUILD/CPackConfig.cmake")
TAG="${TAG:-colossal:$VERSION}"
docker info > /dev/null 2>&1 || { echo "build-image.sh: no Docker daemon answers (docker info); start dockerd (docker.io)" >&2; exit 1; }

CTX="$BUILD/image"
rm -rf "$CTX"
mkdir -p "$CTX"
echo "== cpack -G DEB -> $CTX"
(cd "$BUILD" && cpack -G DEB -B "$CTX/cpack" > "$CTX/cpack.log" 2>&1) || { cat "$CTX/cpack.log" >&2; exit 1; }
cp "$CTX"/cpack/*.deb "$CTX"/
rm -rf "$CTX/cpack"

BASE=$(bash "$ROOT/scripts/debian-base.sh" "$BUILD/debian12")
echo "== docker import $BASE colossal-base:bookworm"
docker import "$BASE" colossal-base:bookworm > /dev/null

cat > "$CTX/Dockerfile" <<DOCKERFILE
FROM colossal-base:bookworm
COPY *.deb /tmp/colossal/
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      /tmp/colossal/colossal-runtime_${VERSION}_*.deb /tmp/colossal/colossal_${VERSION}_*.deb \\
      python3-onnx python3-numpy \\
 && rm -rf /var/lib/apt/lists/* /tmp/colossal
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LANG=C.UTF-8
WORKDIR /work
CMD ["colossal-run", "--help"]
DOCKERFILE
echo "== docker build -t $TAG"
# --network host: the build's apt reaches the mirror without the daemon's bridge and NAT.
docker build --network host -t "$TAG" "$CTX" > "$CTX/build.log" 2>&1 || { tail -30 "$CTX/build.log" >&2; exit 1; }
docker image ls "$TAG"
echo "built $TAG: docker run --rm $TAG colossal-run --help"
