#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, when missing, and
# downloads the Go modules. Safe to run again: it only installs what is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(
  # end-to-end tests: FUSE attach, filesystems, the NBD peer benchmark
  # (scripts/bench.sh) and its loopback TCP reference stream
  fuse3 e2fsprogs fio nbdkit util-linux iperf3
  # the Debian package test: systemd-analyze verify of srptd.service
  systemd
  # network fault campaign (scripts/campaign/netfault.sh): packet loss, partitions
  nftables iproute2
  # srpctl nbd tests: qemu-img and qemu-io as NBD clients (fio is above)
  qemu-utils
  # cgo verbs provider (built with -tags verbs)
  libibverbs-dev librdmacm-dev rdma-core pkg-config gcc
  # VM interop suite
  qemu-system-x86 mmdebstrap busybox-static cpio xz-utils zstd e2fsprogs kmod
  # ... and its out-of-tree siw.ko build (gcc-12 = the compiler of Debian 12's kernel)
  gcc-12 make libelf1
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
# retry CMD...: three tries (a mirror, the module proxy or the dpkg lock of a
# starting machine's own apt run can fail one try).
retry() {
  local try
  for try in 1 2 3; do
    "$@" && return 0
    echo "deps: '$*' failed (try $try of 3)" >&2
    sleep $((try * 10))
  done
  return 1
}
# apt_once PKG...: one apt-get update and install.
apt_once() {
  $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=120 "$@" >/dev/null
}
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  retry apt_once "${missing[@]}"
fi
# Single-node Ceph for the RBD backstore tests (scripts/ceph-up.sh) and the
# cgo rbd backstore (-tags ceph,pacific), sg3_utils to decode ALUA pages. Not
# fatal: without them the Ceph tests are skipped with a message.
ceph=(ceph-mon ceph-osd ceph-common librbd-dev librados-dev sg3-utils)
cmissing=()
for p in "${ceph[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || cmissing+=("$p")
done
if ((${#cmissing[@]})); then
  echo "deps: installing ${cmissing[*]}"
  retry apt_once "${cmissing[@]}" ||
    echo "deps: WARNING: could not install ${cmissing[*]}: the Ceph RBD tests will be skipped" >&2
fi
export PATH=$PATH:/usr/local/go/bin
retry go mod download
# static analysis, pinned (scripts/test.sh runs it)
staticcheck_version=v0.8.2
if ! [ -x "$(go env GOPATH)/bin/staticcheck" ] ||
  ! "$(go env GOPATH)/bin/staticcheck" -version 2>/dev/null | grep -q "(${staticcheck_version#v})"; then
  echo "deps: installing staticcheck $staticcheck_version"
  retry go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
fi
