#!/usr/bin/env bash
# The Debian packages in a fresh Debian 12 root (issue 17, done-when 2): `cpack -G DEB`, a root
# unpacked from scripts/debian-base.sh's debootstrap tarball, the packages installed there by apt
# (which resolves their dependencies from the Debian mirror), then inside the root, as a user would:
# an ONNX model made with python3-onnx (test/install/onnx_mlp.py, no PyTorch) compiled by the
# installed colossal-opt and run by the installed colossal-run on one rank and on dp=2
# (--nproc 2), outputs against NumPy.
#
#   deb_debian12.sh BUILD_DIR WORKDIR
#
# Caches under BUILD_DIR/debian12: base.tar (debootstrap) and apt-archives/ (the .deb files apt
# fetched), so a rerun downloads nothing but the apt lists. The root is WORKDIR/root, with /proc,
# /sys, /dev/shm and the apt cache mounted while the test runs; they are unmounted on any exit.
# Prints the disk space apt reports for colossal-runtime alone and for colossal on top of it.
# Exit 77 (ctest: Skipped) when not root or debootstrap, chroot, cpack or dpkg-deb is missing.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (chroot, mounts)"; exit 77; }
for t in debootstrap chroot cpack dpkg-deb; do
  command -v "$t" > /dev/null || { echo "skipped: $t is not on PATH (scripts/install-deps.sh)"; exit 77; }
done
BUILD="$(cd "$1" && pwd)" W="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../.." && pwd)"
ROOTFS="$W/root"
fail() { echo "FAIL: $*"; exit 1; }
unmount_all() {  # every mount under the root, deepest first
  local m
  for m in $(awk -v r="$ROOTFS/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" || true
  done
}
trap unmount_all EXIT
unmount_all
rm -rf --one-file-system "$W"
mkdir -p "$W/packages" "$ROOTFS" "$BUILD/debian12/apt-archives/partial"
t0=$(date +%s)

echo "== cpack -G DEB"
(cd "$BUILD" && cpack -G DEB -B "$W/packages" > "$W/cpack.log" 2>&1) || { cat "$W/cpack.log"; fail "cpack -G DEB"; }
for p in "$W"/packages/*.deb; do
  echo "$(basename "$p"): $(dpkg-deb -f "$p" Depends)"
done
RUNTIME_DEB=$(ls "$W"/packages/colossal-runtime_*.deb) COMPILER_DEB=$(ls "$W"/packages/colossal_*.deb)

echo "== a fresh Debian 12 root"
BASE=$(bash "$SRC/scripts/debian-base.sh" "$BUILD/debian12")
tar -C "$ROOTFS" -xf "$BASE"
mount -t proc proc "$ROOTFS/proc"
mount -t sysfs -o ro sysfs "$ROOTFS/sys"  # a new instance: no submounts to propagate back
mount -t tmpfs -o size=1g tmpfs "$ROOTFS/dev/shm"
mount --bind "$BUILD/debian12/apt-archives" "$ROOTFS/var/cache/apt/archives"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mkdir -p "$ROOTFS/tmp/colossal"
cp "$RUNTIME_DEB" "$COMPILER_DEB" "$HERE/onnx_mlp.py" "$ROOTFS/tmp/colossal/"
in_root() { chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@"; }
echo "base unpacked in $(( $(date +%s) - t0 )) s (cpack included)"

echo "== apt-get install the packages (dependencies from the Debian mirror)"
in_root apt-get update > "$W/apt-update.log" 2>&1 || { cat "$W/apt-update.log"; fail "apt-get update in the root"; }
space() { grep -o 'After this operation, .*' "$1" || true; }
in_root apt-get install -y --no-install-recommends "/tmp/colossal/$(basename "$RUNTIME_DEB")" \
  > "$W/apt-runtime.log" 2>&1 || { tail -30 "$W/apt-runtime.log"; fail "apt-get install colossal-runtime"; }
echo "colossal-runtime: $(space "$W/apt-runtime.log")"
in_root apt-get install -y --no-install-recommends "/tmp/colossal/$(basename "$COMPILER_DEB")" \
  > "$W/apt-compiler.log" 2>&1 || { tail -30 "$W/apt-compiler.log"; fail "apt-get install colossal"; }
echo "colossal (compiler, on top): $(space "$W/apt-compiler.log")"
in_root apt-get install -y --no-install-recommends python3-onnx python3-numpy \
  > "$W/apt-python.log" 2>&1 || { tail -30 "$W/apt-python.log"; fail "apt-get install python3-onnx"; }
in_root dpkg-query -W colossal colossal-runtime
in_root sh -c 'for t in colossal-opt colossal-run mpirun; do command -v $t; done'
echo "installed in $(( $(date +%s) - t0 )) s"

echo "== the example inside the root (/root/work)"
cat > "$ROOTFS/tmp/colossal/example.sh" <<'SCRIPT'
set -eux
mkdir -p /root/work && cd /root/work
python3 /tmp/colossal/onnx_mlp.py make --out mlp
colossal-opt mlp/model.onnx --spec mlp/spec.yaml -o mlp/model.cplan --report
colossal-run mlp/model.cplan --input x=mlp/x.npy --output-dir out --threads 1
python3 /tmp/colossal/onnx_mlp.py check out/probs.npy mlp/reference.npy
colossal-opt mlp/model.onnx --spec mlp/spec_dp2.yaml -o mlp/model_dp2.cplan
colossal-run --nproc 2 mlp/model_dp2.cplan --input x=mlp/x.npy --output-dir out_dp2 --threads 1
python3 /tmp/colossal/onnx_mlp.py check out_dp2/probs.npy mlp/reference.npy
colossal-run --help | head -3
SCRIPT
in_root bash /tmp/colossal/example.sh 2>&1 | tee "$W/example.log" || fail "the example inside the Debian 12 root"
echo "OK: colossal-runtime and colossal installed by apt into a fresh Debian 12 root; the example ran there ($(( $(date +%s) - t0 )) s)"
