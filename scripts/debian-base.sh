#!/usr/bin/env bash
# A Debian 12 (bookworm) base system as a tarball, made once with debootstrap and cached: the root
# that test/install's package test installs the .deb files into, and the base that
# scripts/build-image.sh imports into docker. Run as root; needs debootstrap and the Debian mirror.
#
#   scripts/debian-base.sh [CACHE_DIR]        # default build/debian12; prints the tarball's path
#
# CACHE_DIR/base.tar: `debootstrap --variant=minbase bookworm` (about 40 s and 200 MB), with apt
# sources for bookworm, bookworm-updates and bookworm-security (libllvm22 comes from the last) and
# no apt lists. Made under a lock, so concurrent callers wait for one debootstrap; delete the file to
# make it anew. DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${1:-${COLOSSAL_BUILD_DIR:-$ROOT/build}/debian12}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
exec 9> "$CACHE/base.lock"
flock 9
if [ ! -f "$CACHE/base.tar" ]; then
  [ "$(id -u)" = 0 ] || { echo "debian-base.sh: debootstrap needs root" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "debian-base.sh: debootstrap is not installed (scripts/install-deps.sh)" >&2; exit 1; }
  dir="$CACHE/base.tmp"
  rm -rf --one-file-system "$dir"
  t0=$(date +%s)
  echo "debian-base.sh: debootstrap --variant=minbase bookworm $dir $MIRROR" >&2
  debootstrap --variant=minbase bookworm "$dir" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; echo "debian-base.sh: debootstrap failed ($CACHE/debootstrap.log)" >&2; exit 1; }
  rm -f "$dir/etc/apt/sources.list"
  cat > "$dir/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/archives/*.deb
  tar -C "$dir" --numeric-owner -cf "$CACHE/base.tar.tmp" .
  mv "$CACHE/base.tar.tmp" "$CACHE/base.tar"
  rm -rf --one-file-system "$dir"
  echo "debian-base.sh: made $CACHE/base.tar in $(( $(date +%s) - t0 )) s" >&2
fi
echo "$CACHE/base.tar"
