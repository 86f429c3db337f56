#!/usr/bin/env bash
# Campaign 5, long fuzzing: runs every Fuzz target of the module (or those
# matching $1, a regular expression) for FUZZTIME each (default 30m), one
# after the other, then copies the new interesting inputs the fuzzing engine
# kept (its cache, $(go env GOCACHE)/fuzz) into the package's
# testdata/fuzz/<target>/ — smallest first, until that directory holds
# KEEP (default 40) inputs — so the test suite's short runs and plain
# `go test` start from them. Commit what it adds. FUZZ_WORKERS=N limits the fuzzing processes
# (default: one per CPU).
#
#   scripts/campaign/fuzz-long.sh                 # the documented run: 30 min per target
#   FUZZTIME=3m scripts/campaign/fuzz-long.sh 'FuzzSession|FuzzIU'
#
# A failing input stops the run (it is written to testdata/fuzz/<target>/
# by the engine, as a regression test); see scripts/fuzz.sh for the engine's
# deadline report that is not a finding. Prints per target the time, the
# executions and the inputs added.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
t=${FUZZTIME:-30m}
keep=${KEEP:-40}
match=${1:-.}
cache=$(go env GOCACHE)/fuzz
log=$(mktemp)
trap 'rm -f "$log"' EXIT
total=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' | grep -E "$match" || true); do
    echo "fuzz-long: $pkg $f ($t)"
    start=$SECONDS
    if ! nice go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" ${FUZZ_WORKERS:+-parallel "$FUZZ_WORKERS"} "$pkg" >"$log" 2>&1; then
      if grep -q 'context deadline exceeded' "$log" && ! grep -qE 'Failing input written|panic:' "$log"; then
        echo "fuzz-long: $f: the engine's deadline expired mid-report (no failing input)"
      else
        cat "$log"
        echo "fuzz-long: $f FAILED; the failing input is in $dir/testdata/fuzz/$f/"
        exit 1
      fi
    fi
    execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
    added=0
    if [ -d "$cache/$pkg/$f" ]; then
      mkdir -p "$dir/testdata/fuzz/$f"
      # Smallest first, until the directory holds KEEP inputs; a file
      # already checked in is not copied twice.
      have=$(find "$dir/testdata/fuzz/$f" -type f | wc -l)
      while read -r _ file; do
        [ $((have + added)) -ge "$keep" ] && break
        name=$(basename "$file")
        [ -e "$dir/testdata/fuzz/$f/$name" ] && continue
        cp "$file" "$dir/testdata/fuzz/$f/$name"
        added=$((added + 1))
      done < <(find "$cache/$pkg/$f" -type f -printf '%s %p\n' | sort -n)
    fi
    total=$((total + 1))
    echo "fuzz-long: $f: $((SECONDS - start)) s, $execs executions, $added inputs added to testdata/fuzz/$f"
  done
done
echo "fuzz-long: $total targets fuzzed for $t each, no failure"
