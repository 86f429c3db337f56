#!/usr/bin/env bash
# The Ceph part of the test suite: starts a single-node cluster
# (scripts/ceph-up.sh) in a temporary directory, runs the tests built with
# -tags ceph,pacific against it (GOSRP_CEPH_CONF), and stops it. Bounded: the
# cluster gets 90 s to come up, the Go tests 5 minutes, the gateway test 7. Without the Ceph
# packages (scripts/deps.sh could not install them) it says so loudly and
# skips.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
if ! command -v ceph-mon >/dev/null || ! command -v ceph-osd >/dev/null || [ ! -e /usr/include/rbd/librbd.h ]; then
  echo "!!!!!!!! SKIPPING the Ceph RBD tests: ceph-mon, ceph-osd or librbd-dev is not installed (scripts/deps.sh could not install them) !!!!!!!!"
  exit 0
fi
tags=ceph,pacific
go vet -tags $tags ./backstore/rbd/... ./cmd/srptd/...
dir=$(mktemp -d /tmp/gosrp-ceph.XXXXXX)
trap './scripts/ceph-up.sh stop "$dir"' EXIT
conf=$(CEPH_UP_TIMEOUT=90 ./scripts/ceph-up.sh start "$dir" | tail -1)
echo "ceph: cluster up ($conf)"
GOSRP_CEPH_CONF=$conf timeout 300 go test -race -tags $tags -timeout 4m -count=1 ./backstore/rbd/...
echo "== ceph: two srptd gateways on one image (ALUA, multipath, SIGKILL)"
GOSRP_CEPH_CONF=$conf timeout 420 test/ceph/gateways.sh
