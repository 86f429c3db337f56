#!/usr/bin/env bash
# The whole test suite: installs missing packages, then vet, staticcheck, unit tests (race
# detector on), short fuzz runs, the end-to-end tests and the VM interop suite.
# GOSRP_SKIP_INTEROP=1 skips the VM suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
./scripts/deps.sh
echo "== go vet"; go vet ./... && go vet -tags verbs ./...
echo "== staticcheck"; "$(go env GOPATH)/bin/staticcheck" ./... && "$(go env GOPATH)/bin/staticcheck" -tags verbs ./...
echo "== build with the verbs provider"; go build -tags verbs -o /dev/null ./...
echo "== go test"; go test -race -timeout 15m ./...
echo "== ceph: RBD backstore against a single-node cluster"; ./scripts/test-ceph.sh
echo "== fuzz"; ./scripts/fuzz.sh
if [ -x test/e2e/run.sh ]; then echo "== e2e"; test/e2e/run.sh; fi
# Short runs of the reliability campaigns that need the programs or root
# (the others run in go test above); docs/RELIABILITY.md has the full runs.
echo "== campaign: srptd crash under srpctl write"; CYCLES=5 SIZE_MIB=16 scripts/campaign/crash.sh
echo "== campaign: packet loss and partition"; PARTS=2 SHORT=1 scripts/campaign/netfault.sh
if [ "${GOSRP_SKIP_INTEROP:-0}" != 1 ] && [ -x test/interop/run.sh ]; then
  echo "== interop"; test/interop/run.sh
fi
echo "== all tests passed"
