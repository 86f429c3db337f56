#!/usr/bin/env bash
# Builds the gosrp Debian package (srptd, srpctl, their manual pages and
# shell completions, srptd.service) with dpkg-deb into OUTDIR (default
# ./dist) and prints the .deb's path.
#   packaging/build-deb.sh [OUTDIR]
# GOSRP_DEB_VERSION sets the package version (default: from git describe,
# or 0.0~gitDATE.COMMIT without tags). GOSRP_DEB_VERBS=0 builds without the
# RDMA verbs provider (no libibverbs/librdmacm dependency).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
out=$(realpath -m "${1:-dist}")
mkdir -p "$out"

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -z "${GOSRP_DEB_VERSION:-}" ]; then
  if d=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
    GOSRP_DEB_VERSION=${d#v}
    GOSRP_DEB_VERSION=${GOSRP_DEB_VERSION//-/+}
  else
    GOSRP_DEB_VERSION="0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date +%Y%m%d).$commit"
  fi
fi
version=$GOSRP_DEB_VERSION
arch=$(dpkg --print-architecture)
tags=verbs depends="libc6, libibverbs1, librdmacm1"
if [ "${GOSRP_DEB_VERBS:-1}" = 0 ]; then tags="" depends="libc6"; fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
ldflags="-s -w -X github.com/gosrp/gosrp/internal/buildinfo.version=$version -X github.com/gosrp/gosrp/internal/buildinfo.commit=$commit"
install -d "$root/usr/sbin" "$root/usr/bin"
go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$root/usr/sbin/srptd" ./cmd/srptd
go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$root/usr/bin/srpctl" ./cmd/srpctl

# Manual pages: srptd(8) and srpctl(8) from the command definitions,
# srptd.toml(5) from docs/srptd.md.
man=$root/usr/share/man
"$root/usr/sbin/srptd" man "$man/man8"
"$root/usr/bin/srpctl" man "$man/man8"
install -d "$man/man5"
go run ./packaging/mantoml -doc docs/srptd.md -version "$version" >"$man/man5/srptd.toml.5"
gzip -9n "$man"/man*/*

# Shell completions.
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions"
for p in srptd:usr/sbin srpctl:usr/bin; do
  name=${p%%:*} bin=$root/${p#*:}/${p%%:*}
  "$bin" completion bash >"$root/usr/share/bash-completion/completions/$name"
  "$bin" completion zsh >"$root/usr/share/zsh/vendor-completions/_$name"
done

install -D -m 0644 packaging/srptd.service "$root/lib/systemd/system/srptd.service"
install -D -m 0644 packaging/srptd.default "$root/etc/default/srptd"
install -D -m 0644 README.md "$root/usr/share/doc/gosrp/README.md"
install -m 0644 docs/srptd.md "$root/usr/share/doc/gosrp/srptd.md"

install -d "$root/DEBIAN"
echo /etc/default/srptd >"$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: gosrp
Version: $version
Architecture: $arch
Maintainer: gosrp developers <gosrp@localhost>
Installed-Size: $size
Depends: $depends
Section: net
Priority: optional
Homepage: https://github.com/gosrp/gosrp
Description: user-space SCSI RDMA Protocol (SRP) target and initiator
 srptd exports files, block devices and RAM as SCSI logical units to SRP
 initiators (Linux ib_srp, srpctl) over pure-Go iWARP on TCP or RDMA
 hardware. srpctl logs in to SRP targets, moves data, attaches LUNs through
 FUSE, benchmarks, decodes SRP information units and administers srptd.
 Built from commit $commit.
CONTROL
# The service is installed, not enabled: `systemctl enable --now srptd`.
# DPKG_ROOT is set when installing into another root (dpkg --root).
for s in postinst postrm; do
  cat >"$root/DEBIAN/$s" <<'SCRIPT'
#!/bin/sh
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null || true
fi
SCRIPT
  chmod 0755 "$root/DEBIAN/$s"
done

deb=$out/gosrp_${version}_${arch}.deb
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "$deb"
