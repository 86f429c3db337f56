#!/bin/bash
# summary: srpctl (pure-Go iWARP) -> LIO ib_srpt over siw ([2001:db8::2]:5555): login, inquiry, readcap, verified write/read, TMFs
# timeout: 420
# Every srpctl call is one login and one logout.  Data written by srpctl is
# read back by srpctl and, independently, by the kernel initiator over rxe.
. /gosrp/suite/guest/lib.sh
command -v srpctl >/dev/null || skip "srpctl not built"
srpctl login --help >/dev/null 2>&1 || skip "srpctl has no login command yet"

siw_up || die "siw0 did not come up"
rxe_up || die "rxe0 did not come up"
MB=128
lio_start $MB siw0 rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
T="id_ext=$guid,ioc_guid=$guid,dest=[$SIW_IP6]:$LIO_PORT"
sc() { timeout 60 srpctl "$@"; }

log "=== login $T"
out=$(sc login "$T" 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || die "srpctl login to LIO failed"
# ib_srpt's target port id is service_guid || service_guid (reference/linux-srp.md)
grep -q "target port ID *$guid$guid" <<<"$out" || fail "login: target port ID is not $guid$guid"

log "=== inquiry"
out=$(sc inquiry "$T" 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || fail "inquiry"
grep -q '^vendor *LIO-ORG' <<<"$out" || fail "inquiry: vendor is not LIO-ORG"
grep -q '^product *RAMDISK-MCP' <<<"$out" || fail "inquiry: product is not RAMDISK-MCP"
out=$(sc inquiry --vpd 0x80 "$T" 2>&1) && grep -q 'lio-lun0' <<<"$out" || { echo "$out"; fail "VPD 0x80 lacks the unit serial lio-lun0"; }

log "=== readcap"
out=$(sc readcap "$T" 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || fail "readcap"
grep -q "^block size *512$" <<<"$out" || fail "readcap: block size is not 512"
grep -q "^blocks *$((MB * 2048))$" <<<"$out" || fail "readcap: not $((MB * 2048)) blocks"

# WRITE(10)/READ(10) CDBs: opcode, flags, 4-byte LBA, group, 2-byte length, control
cdb10() { printf '%02x 00 %08x 00 %04x 00' "$1" "$2" "$3" | sed 's/\(..\)\(..\)\(..\)\(..\) 00 \(..\)\(..\) 00$/\1 \2 \3 \4 00 \5 \6 00/'; }
for spec in 64k:2048:128 512k:8192:1024; do   # 512 KiB = ib_srp's default max_sect
	IFS=: read -r name lba blocks <<<"$spec"
	log "=== verified write/read $name at LBA $lba"
	head -c $((blocks * 512)) /dev/urandom >/tmp/w-$name
	w=$(cdb10 0x2a "$lba" "$blocks") r=$(cdb10 0x28 "$lba" "$blocks")
	check "WRITE(10) $name ($w)" sc scsi "$T" "$w" --out /tmp/w-$name
	sc scsi "$T" "$r" --in $((blocks * 512)) --binary >/tmp/r-$name || fail "READ(10) $name ($r)"
	check "srpctl read-back $name" cmp /tmp/w-$name /tmp/r-$name
done

log "=== TMFs"
out=$(sc tmf "$T" abort --tag 0x1234 2>&1); rc=$?
echo "$out (exit $rc)"
# No task with that tag exists: LIO answers TASK DOES NOT EXIST, which
# ib_srpt reports as SRP_TSK_MGMT_FAILED (srpt_tsk_mgmt_status).
grep -qi 'abort task' <<<"$out" || fail "tmf abort: no response"
out=$(sc tmf "$T" lun-reset 2>&1); rc=$?
echo "$out (exit $rc)"
[ $rc = 0 ] || fail "tmf lun-reset"
# after a LUN reset LIO reports a unit attention once per I_T nexus; each
# srpctl call is a new nexus, so the data must simply still be there
sc scsi "$T" "$(cdb10 0x28 2048 128)" --in 65536 --binary >/tmp/r2 && cmp /tmp/w-64k /tmp/r2 ||
	fail "data after lun-reset"

log "=== cross-check: kernel ib_srp over rxe reads what srpctl wrote"
disk=$(lio_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$RXE_IP:$LIO_PORT")") || die "kernel login over rxe0"
check "kernel read-back 64k" cmp /tmp/w-64k <(dd if="$disk" bs=512 skip=2048 count=128 iflag=direct status=none)
check "kernel read-back 512k" cmp /tmp/w-512k <(dd if="$disk" bs=512 skip=8192 count=1024 iflag=direct status=none)
check "kernel logout" srp_logout

log "=== logout: no iWARP connection to LIO left open"
conns() { ss -Htn state established "( sport = :$LIO_PORT or dport = :$LIO_PORT )"; }
wait_for 100 test -z "$(conns)" && log "ok: no TCP connection on port $LIO_PORT" ||
	{ conns; fail "connections to LIO remain after every srpctl exited"; }
finish
