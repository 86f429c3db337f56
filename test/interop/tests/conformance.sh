#!/bin/bash
# summary: libiscsi iscsi-test-cu (SCSI suites for a disk) through ib_srp's /dev/sgN: srptd vs LIO ib_srpt, side by side
# timeout: 1200
# Both targets are reached over siw by the kernel initiator: srptd at
# 192.0.2.2:5556, LIO (rd_mcp LUN) at [2001:db8::2]:5555.  The test fails
# when a test that passes against LIO FAILS against srptd, unless it is
# listed in conformance-expected.txt (with the reason).
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
# The SCSI-family suites that make sense for a RAM disk, without the long
# loops of Verify*, WriteSame*, Sanitize and EXTENDED COPY (about 4 minutes per
# target under TCG).
SUITE=$(paste -sd, <<'LIST'
SCSI.TestUnitReady
SCSI.Inquiry
SCSI.Mandatory
SCSI.ModeSense6
SCSI.NoMedia
SCSI.ReadCapacity10
SCSI.ReadCapacity16
SCSI.ReadDefectData10
SCSI.ReadDefectData12
SCSI.ReportSupportedOpcodes
SCSI.Read6
SCSI.Read10
SCSI.Read12
SCSI.Read16
SCSI.Write10
SCSI.Write12
SCSI.Write16
SCSI.WriteVerify10
SCSI.WriteVerify12
SCSI.WriteVerify16
SCSI.CompareAndWrite
SCSI.OrWrite
SCSI.GetLBAStatus
SCSI.Prefetch10
SCSI.Prefetch16
SCSI.PreventAllow
SCSI.StartStopUnit
SCSI.Unmap
SCSI.Reserve6
SCSI.PrinReadKeys
SCSI.PrinServiceactionRange
SCSI.PrinReportCapabilities
SCSI.ProutRegister
SCSI.ProutReserve
SCSI.ProutClear
SCSI.ProutPreempt
LIST
)

siw_up || die "siw0 did not come up"
srptd_start || die "srptd did not start"
lio_start 256 siw0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
ours=$(srptd_login) || die "login to srptd"
lio=$(lio_login siw0 "$(srp_string siw0 "$guid" "$guid" "[$SIW_IP6]:$LIO_PORT")") || die "login to LIO"
log "srptd: $ours $(sg_of "$ours"); LIO: $lio $(sg_of "$lio")"

# results LOG -> "Suite.Test RESULT" lines, RESULT passed, FAILED, SKIPPED or ?
# (CUnit prints "Test: NAME ..." and the verdict later on the same or a
# following line; libiscsi marks skips with "[SKIPPED]").
results() {
	awk '/^Suite: / {s = $2; next}
		/^ *Test: / {if (p != "") print p, "?"; p = s "." $2; sub(/^ *Test: [^ ]* \.\.\./, "")}
		p != "" {
			if (/\[FAILED\]/) {print p, "FAILED"; p = ""}
			else if (/\[SKIPPED\]/) {print p, "SKIPPED"; p = ""}
			else if (/passed$/) {print p, "passed"; p = ""}
		}
		END {if (p != "") print p, "?"}' "$1"
}
for t in ours lio; do
	dev=${!t}
	log "=== iscsi-test-cu --dataloss -t <${SUITE//[^,]/} suites> $(sg_of "$dev") ($t)"
	s=$SECONDS
	timeout 500 iscsi-test-cu --dataloss -t "$SUITE" "$(sg_of "$dev")" >"$RUN/testcu-$t.log" 2>&1
	log "iscsi-test-cu exit $? after $((SECONDS - s)) s"
	results "$RUN/testcu-$t.log" | sort >/tmp/res-$t
	[ -s /tmp/res-$t ] || { tail -20 "$RUN/testcu-$t.log"; die "no results from iscsi-test-cu against $t"; }
done
count() { awk -v r="$2" '$2 == r' /tmp/res-$1 | wc -l; }
printf '%-10s %8s %8s\n' "" srptd LIO
for r in passed FAILED SKIPPED; do printf '%-10s %8s %8s\n' "$r" "$(count ours $r)" "$(count lio $r)"; done
printf '%-10s %8s %8s\n' total "$(wc -l </tmp/res-ours)" "$(wc -l </tmp/res-lio)"
figure srptd-passed "$(count ours passed)/$(wc -l </tmp/res-ours)"
figure lio-passed "$(count lio passed)/$(wc -l </tmp/res-lio)"
join -a1 -a2 -e - -o 0,1.2,2.2 /tmp/res-ours /tmp/res-lio | awk '$2 != $3' |
	awk 'BEGIN {print "tests whose result differs (test srptd LIO):"} {print "  " $0}'
expected=/gosrp/suite/conformance-expected.txt
# A SKIPPED test (the target lacks an optional feature) is reported above,
# not counted; FAILED and "?" (no verdict) are.
regress=$(join /tmp/res-ours /tmp/res-lio | awk '($2 == "FAILED" || $2 == "?") && $3 == "passed" {print $1}' |
	grep -vxF -f <(sed 's/[[:space:]]*#.*//; /^$/d' "$expected") || true)
if [ -n "$regress" ]; then
	fail "pass against LIO, fail against srptd (and not in conformance-expected.txt): $(echo $regress)"
fi
srp_logout
check "srptd stops cleanly" srptd_stop
finish
