#!/bin/bash
# summary: libiscsi iscsi-test-cu (SCSI family) through ib_srp's /dev/sgN: srptd vs LIO ib_srpt, side by side
# timeout: 1200
# Both targets are reached over siw by the kernel initiator: srptd at
# 192.0.2.2:5556, LIO (rd_mcp LUN) at [2001:db8::2]:5555.  The test fails
# when a test that passes against LIO fails against srptd, unless it is
# listed in conformance-expected.txt (with the reason).
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
SUITE=${CONFORMANCE_SUITE:-SCSI}

siw_up || die "siw0 did not come up"
srptd_start || die "srptd did not start"
lio_start 256 siw0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
ours=$(srptd_login) || die "login to srptd"
lio=$(srp_login siw0 "$(srp_string siw0 "$guid" "$guid" "[$SIW_IP6]:$LIO_PORT")") || die "login to LIO"
log "srptd: $ours $(sg_of "$ours"); LIO: $lio $(sg_of "$lio")"

# results LOG -> "NAME RESULT" lines (passed, FAILED, SKIPPED?)
results() { sed -n 's/^ *Test: \([^ ]*\) \.\.\.\(.*\)$/\1 \2/p' "$1" | awk '{print $1, $NF}'; }
for t in ours lio; do
	dev=${!t}
	log "=== iscsi-test-cu --dataloss -t $SUITE $(sg_of "$dev") ($t)"
	s=$SECONDS
	timeout 500 iscsi-test-cu --dataloss -t "$SUITE" "$(sg_of "$dev")" >"$RUN/testcu-$t.log" 2>&1
	log "iscsi-test-cu exit $? after $((SECONDS - s)) s"
	results "$RUN/testcu-$t.log" | sort >/tmp/res-$t
	[ -s /tmp/res-$t ] || { tail -20 "$RUN/testcu-$t.log"; die "no results from iscsi-test-cu against $t"; }
done
count() { awk -v r="$2" '$2 == r' /tmp/res-$1 | wc -l; }
printf '%-10s %8s %8s\n' "" srptd LIO
for r in passed FAILED; do printf '%-10s %8s %8s\n' "$r" "$(count ours $r)" "$(count lio $r)"; done
printf '%-10s %8s %8s\n' total "$(wc -l </tmp/res-ours)" "$(wc -l </tmp/res-lio)"
figure srptd-passed "$(count ours passed)/$(wc -l </tmp/res-ours)"
figure lio-passed "$(count lio passed)/$(wc -l </tmp/res-lio)"
join -a1 -a2 -e - -o 0,1.2,2.2 /tmp/res-ours /tmp/res-lio | awk '$2 != $3' |
	awk 'BEGIN {print "tests whose result differs (test srptd LIO):"} {print "  " $0}'
expected=/gosrp/suite/conformance-expected.txt
regress=$(join /tmp/res-ours /tmp/res-lio | awk '$2 != "passed" && $3 == "passed" {print $1}' |
	grep -vxF -f <(sed 's/[[:space:]]*#.*//; /^$/d' "$expected") || true)
if [ -n "$regress" ]; then
	fail "pass against LIO, fail against srptd (and not in conformance-expected.txt): $(echo $regress)"
fi
srp_logout
check "srptd stops cleanly" srptd_stop
finish
