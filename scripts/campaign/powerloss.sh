#!/usr/bin/env bash
# Campaign 2, power loss: a logical unit on backstore.PowerLoss, which
# drops every write not yet made durable when the power is cut, is cut
# CYCLES times (default 1000) under random WRITE(16) (FUA or not),
# SYNCHRONIZE CACHE and READ(16) and restarted on what the medium kept;
# with the write cache on (WCE=1) FUA writes and writes before a completed
# SYNCHRONIZE CACHE must survive, with it off every acknowledged write must
# (scsi TestPowerLossCampaign), and the same with the write cache on and
# eight concurrent writers and flushes (TestPowerLossConcurrent); the test
# suite runs 20 and 10 cycles.
#
#   scripts/campaign/powerloss.sh
#   CYCLES=100 scripts/campaign/powerloss.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
GOSRP_CAMPAIGN_CYCLES=${CYCLES:-1000} go test -count=1 -timeout 30m ./scsi -run 'TestPowerLossCampaign|TestPowerLossConcurrent' -v |
  grep -E 'powerloss_test|^(---|ok|FAIL|panic)'
