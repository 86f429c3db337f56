#!/bin/bash
# summary: sg_reset (LUN, target, host) while fio runs against srptd over siw; channel survives, data verifies
# timeout: 600
# ib_srp turns a device reset into SRP_TSK_MGMT LOGICAL UNIT RESET
# (srp_reset_device) and a host reset into a reconnect: logout and a fresh
# login (srp_reset_host -> srp_reconnect_rport).  Commands caught by a reset
# are completed by ib_srp with DID_RESET and retried by the SCSI midlayer, so
# fio must finish, and its crc32c verify pass.
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"

siw_up || die "siw0 did not come up"
srptd_start || die "srptd did not start"
disk=$(srptd_login) || die "kernel ib_srp login to srptd failed"
log "disk $disk"
host=$(ls -d /sys/block/${disk#/dev/}/device/scsi_device/* | sed 's|.*/||; s/:.*//')

# resets RESET...: runs while fio writes; each reset waits for fio to make progress first.
# fio is paced (rate_iops) so that its write phase outlasts the resets however
# fast the target is: 12288 writes at 1500/s take 8 s, the resets about 7 s.
run_with_resets() {
	local name=$1 i r
	shift
	fio --name="$name" --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
		--size=48M --rate_iops=1500 --verify=crc32c --do_verify=1 --verify_fatal=1 --output=/tmp/fio-$name.out &
	local fpid=$!
	for r in "$@"; do
		sleep 2
		kill -0 $fpid 2>/dev/null || { fail "fio ended before the $r reset"; break; }
		log "sg_reset $r $disk"
		timeout 120 sg_reset $r "$disk"; rc=$?
		case $r in
		-d | -H) [ $rc = 0 ] && log "ok: sg_reset $r" || fail "sg_reset $r (exit $rc)" ;;
		-t) log "sg_reset -t exit $rc (ib_srp has a device and a host reset handler)" ;;
		esac
		timeout 30 sg_inq "$disk" >/dev/null && log "ok: INQUIRY after sg_reset $r" || fail "INQUIRY after sg_reset $r"
	done
	for ((i = 0; i < 3000; i++)); do kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
	kill -0 $fpid 2>/dev/null && { kill -9 $fpid; fail "fio $name hung (300 s)"; }
	wait $fpid; rc=$?
	grep -E 'IOPS=|err=|verify' /tmp/fio-$name.out | sed 's/^/  /'
	[ $rc = 0 ] && grep -q 'err= 0' /tmp/fio-$name.out || fail "fio $name under resets (exit $rc)"
}

log "=== LUN reset and target reset during writes"
run_with_resets lunreset -d -t -d
log "=== host reset (reconnect) during writes"
run_with_resets hostreset -H
grep -E 'SRP|srp|reset|reconnect' <(dmesg) | tail -20
log "=== channel survives: fresh write + verify"
fio_run after --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=8 \
	--offset=256M --size=16M --verify=crc32c --do_verify=1 --verify_fatal=1 || fail "fio after the resets"
check "logout" srp_logout
check "srptd stops cleanly" srptd_stop
finish
