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
step() { echo "== [$(($(date +%s) - t0)) s] $*"; }
step "deps"; ./scripts/deps.sh
step "go vet"; go vet ./...; go vet -tags verbs ./...
step "staticcheck"; "$(go env GOPATH)/bin/staticcheck" ./...; "$(go env GOPATH)/bin/staticcheck" -tags verbs ./...
step "build with the verbs provider"; go build -tags verbs -o /dev/null ./...
step "go test"; go test -race -timeout 15m ./...
step "ceph: RBD backstore against a single-node cluster"; ./scripts/test-ceph.sh
step "fuzz"; ./scripts/fuzz.sh
if [ -x test/e2e/run.sh ]; then step "e2e"; test/e2e/run.sh; fi
# Short runs of the reliability campaigns that need the programs or root
# (the others run in go test above); docs/RELIABILITY.md has the full runs.
step "campaign: srptd crash under srpctl write"; CYCLES=5 SIZE_MIB=16 scripts/campaign/crash.sh
step "campaign: packet loss and partition"; PARTS=2 SHORT=1 scripts/campaign/netfault.sh
if [ "${GOSRP_SKIP_INTEROP:-0}" != 1 ] && [ -x test/interop/run.sh ]; then
  step "interop"; test/interop/run.sh
fi
step "all tests passed"
