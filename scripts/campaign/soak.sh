#!/usr/bin/env bash
# Campaign 4, exhaustion and soak (test/reliability, whole stack in one
# process over pure-Go iWARP on 127.0.0.1):
#   - 1000 login/logout cycles, then 256 channels at once: goroutines and
#     file descriptors back to their baseline, RSS reported;
#   - 8 initiators x QD 128 x 1 MiB READs against a 64 MiB data buffer
#     budget: the budget holds, the excess gets TASK SET FULL, data verifies;
#   - a 30-minute mixed soak: 8 initiators, random verified WRITEs and READs.
#
#   scripts/campaign/soak.sh                 # the documented run (about 35 min)
#   SOAK=2m scripts/campaign/soak.sh         # a shorter soak
#
# The test suite runs the same tests with 50 cycles, 32 channels, QD 16 and
# a 10 s soak. Without the race detector here: it multiplies memory use.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
SOAK=${SOAK:-30m}
RELIABILITY_LOGINS=${LOGINS:-1000} RELIABILITY_CHANNELS=${CHANNELS:-256} RELIABILITY_QD=${QD:-128} \
  RELIABILITY_BUDGET_TIME=${BUDGET_TIME:-60s} RELIABILITY_SOAK=$SOAK \
  go test -count=1 -timeout 3h ./test/reliability -run 'TestLoginCycles|TestDataMemoryBudget|TestMixedSoak' -v |
  grep -E 'soak_test|^(---|ok|FAIL|panic)'
