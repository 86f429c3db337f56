#!/usr/bin/env bash
# Runs every Fuzz target in the module for a short time each (default 3s).
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-3s}
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $f ($t)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" >/tmp/gosrp-fuzz.log 2>&1 || { cat /tmp/gosrp-fuzz.log; exit 1; }
  done
done
