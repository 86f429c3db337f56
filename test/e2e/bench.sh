#!/usr/bin/env bash
# srpctl bench against srptd, side by side with the NBD peer (fio's nbd
# engine against nbdkit's memory plugin): the same as scripts/bench.sh with
# RUNTIME_S seconds per job run. Further arguments go to scripts/bench.sh.
# Usage: test/e2e/bench.sh [RUNTIME_S] [scripts/bench.sh flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
rt=${1:-8}
shift || true
exec scripts/bench.sh --runtime "${rt}s" "$@"
