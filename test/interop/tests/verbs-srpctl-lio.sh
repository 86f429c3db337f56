#!/bin/bash
# summary: srpctl-verbs (libibverbs, rxe0) -> LIO ib_srpt (192.0.2.1:5555): login, inquiry, readcap, verified write/read, ABORT TASK, LUN RESET
# timeout: 600
# Every srpctl call is one login and one logout over RDMA/CM on soft-RoCE.
# Data written by srpctl is read back by srpctl and, independently, by the
# kernel initiator.
. /gosrp/suite/guest/lib.sh
command -v srpctl-verbs >/dev/null || skip "srpctl-verbs not built"
ulimit -l unlimited

rxe_up || die "rxe0 did not come up"
# RDMA/CM resolves 192.0.2.1 through the IPv4-mapped GID, which the GID
# table gains shortly after the link comes up.
wait_for 100 grep -qx '0000:0000:0000:0000:0000:ffff:c000:0201' /sys/class/infiniband/rxe0/ports/1/gids/* ||
	die "rxe0 has no GID for $RXE_IP"
MB=128
lio_start $MB rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
node=$(tr -d : </sys/class/infiniband/rxe0/node_guid)
check "ib_srpt's service GUID is the node GUID ($node)" test "$guid" = "$node"
T="id_ext=$guid,ioc_guid=$guid,dest=$RXE_IP:$LIO_PORT,transport=verbs"
sc() { timeout 60 srpctl-verbs "$@"; }

log "=== login $T"
out=$(sc login "$T" 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || die "srpctl-verbs login to LIO failed"
# ib_srpt's target port id is service_guid || service_guid (reference/linux-srp.md)
grep -q "target port ID *$guid$guid" <<<"$out" || fail "login: target port ID is not $guid$guid"

log "=== inquiry"
out=$(sc inquiry "$T" 2>&1); rc=$?
echo "$out"
check "inquiry" test $rc = 0
grep -q '^vendor *LIO-ORG' <<<"$out" || fail "inquiry: vendor is not LIO-ORG"
grep -q '^product *RAMDISK-MCP' <<<"$out" || fail "inquiry: product is not RAMDISK-MCP"
out=$(sc inquiry --vpd 0x80 "$T" 2>&1) && grep -q 'lio-lun0' <<<"$out" || { echo "$out"; fail "VPD 0x80 lacks the unit serial lio-lun0"; }

log "=== readcap"
out=$(sc readcap "$T" 2>&1); rc=$?
echo "$out"
check "readcap" test $rc = 0
grep -q "^block size *512$" <<<"$out" || fail "readcap: block size is not 512"
grep -q "^blocks *$((MB * 2048))$" <<<"$out" || fail "readcap: not $((MB * 2048)) blocks"

# WRITE(10)/READ(10) CDBs: opcode, flags, 4-byte LBA, group, 2-byte length, control
cdb10() { printf '%02x 00 %08x 00 %04x 00' "$1" "$2" "$3" | sed 's/\(..\)\(..\)\(..\)\(..\) 00 \(..\)\(..\) 00$/\1 \2 \3 \4 00 \5 \6 00/'; }
for spec in 4k:100:8 64k:2048:128 512k:8192:1024; do   # 512 KiB = ib_srp's default max_sect
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
check "tmf lun-reset answered" test $rc = 0
sc scsi "$T" "$(cdb10 0x28 2048 128)" --in 65536 --binary >/tmp/r2 && cmp /tmp/w-64k /tmp/r2 ||
	fail "data after lun-reset"

log "=== cross-check: kernel ib_srp over rxe reads what srpctl-verbs wrote"
disk=$(srp_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$RXE_IP:$LIO_PORT")") || die "kernel login over rxe0"
check "kernel read-back 64k" cmp /tmp/w-64k <(timeout 30 dd if="$disk" bs=512 skip=2048 count=128 iflag=direct status=none)
check "kernel read-back 512k" cmp /tmp/w-512k <(timeout 30 dd if="$disk" bs=512 skip=8192 count=1024 iflag=direct status=none)
check "kernel logout" srp_logout
finish
