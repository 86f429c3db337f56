#!/usr/bin/env bash
# The whole test suite: installs missing packages, then vet, staticcheck, unit tests (race
# detector on), short fuzz runs, the end-to-end tests and the VM interop suite.
# GOSRP_SKIP_INTEROP=1 skips the VM suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
t0=$(date +%s)
# Each step's start is printed with the seconds since the run began, and a
# failing step is named, so a log shows where a run failed and where its
# time went.
trap 'echo "== FAILED at $(($(date +%s) - t0)) s: $BASH_COMMAND" >&2' ERR
echo "== [$(($(date +%s) - t0)) s] deps"; ./scripts/deps.sh
echo "== [$(($(date +%s) - t0)) s] go vet"; go vet ./...; go vet -tags verbs ./...
echo "== [$(($(date +%s) - t0)) s] staticcheck"; "$(go env GOPATH)/bin/staticcheck" ./...; "$(go env GOPATH)/bin/staticcheck" -tags verbs ./...
echo "== [$(($(date +%s) - t0)) s] build with the verbs provider"; go build -tags verbs -o /dev/null ./...
echo "== [$(($(date +%s) - t0)) s] go test"; go test -race -timeout 15m ./...
echo "== [$(($(date +%s) - t0)) s] ceph: RBD backstore against a single-node cluster"; ./scripts/test-ceph.sh
echo "== [$(($(date +%s) - t0)) s] fuzz"; ./scripts/fuzz.sh
if [ -x test/e2e/run.sh ]; then echo "== [$(($(date +%s) - t0)) s] e2e"; test/e2e/run.sh; fi
# Short runs of the reliability campaigns that need the programs or root
# (the others run in go test above); docs/RELIABILITY.md has the full runs.
echo "== [$(($(date +%s) - t0)) s] campaign: srptd crash under srpctl write"; CYCLES=5 SIZE_MIB=16 scripts/campaign/crash.sh
echo "== [$(($(date +%s) - t0)) s] campaign: packet loss and partition"; PARTS=2 SHORT=1 scripts/campaign/netfault.sh
if [ "${GOSRP_SKIP_INTEROP:-0}" != 1 ] && [ -x test/interop/run.sh ]; then
  echo "== [$(($(date +%s) - t0)) s] interop"; test/interop/run.sh
fi
echo "== [$(($(date +%s) - t0)) s] all tests passed"
