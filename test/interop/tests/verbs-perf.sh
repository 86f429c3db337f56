#!/bin/bash
# summary: fio 4 KiB randread QD32 and 1 MiB seq read: srptd-verbs vs LIO ib_srpt on rxe0, each without and with use_srq, ratios; VPD 83h target port designators compared
# timeout: 900
# All through kernel ib_srp over soft-RoCE: srptd-verbs at 192.0.2.1:5556,
# LIO (rd_mcp) at 192.0.2.1:5555; first each with a receive queue per
# channel, then each with one shared receive queue (srptd use_srq, LIO's
# attrib/use_srq).  TCG numbers only compare A with B in one run.
. /gosrp/suite/guest/lib.sh
command -v srptd-verbs >/dev/null || skip "srptd-verbs not built"
ulimit -l unlimited
SECS=${PERF_SECONDS:-10}
PORT=5556
ADDR=$RXE_IP:$PORT

rxe_up || die "rxe0 did not come up"
# RDMA/CM resolves 192.0.2.1 through the IPv4-mapped GID, which the GID
# table gains shortly after the link comes up.
wait_for 100 grep -qx '0000:0000:0000:0000:0000:ffff:c000:0201' /sys/class/infiniband/rxe0/ports/1/gids/* ||
	die "rxe0 has no GID for $RXE_IP"

# srptd_verbs_start USE_SRQ: starts srptd-verbs with one 256 MiB RAM LUN.
srptd_verbs_start() {
	cat >"$RUN/srptd-$1.toml" <<TOML
[target]
demo_mode = true
use_srq = $1

[[port]]
name = "rxe"
transport = "verbs"
device = "rxe0"
listen = ["$ADDR"]

[[lun]]
lun = 0
name = "ram0"
backstore = "ram"
size = "256MiB"
TOML
	: >"$RUN/srptd-$1.log"
	srptd-verbs -config "$RUN/srptd-$1.toml" >>"$RUN/srptd-$1.log" 2>&1 &
	SRPTD_PID=$!
	wait_for 600 grep -q '^login_info: ' "$RUN/srptd-$1.log" || { cat "$RUN/srptd-$1.log"; die "srptd-verbs (use_srq=$1) printed no login_info"; }
	SRPTD_INFO=$(grep -m1 '^login_info: ' "$RUN/srptd-$1.log" | sed 's/^login_info: //')
	log "srptd-verbs (use_srq=$1): $SRPTD_INFO"
}
srptd_verbs_stop() {
	kill -TERM $SRPTD_PID
	wait_for 300 sh -c "! kill -0 $SRPTD_PID 2>/dev/null" || { kill -QUIT $SRPTD_PID; sleep 1; kill -KILL $SRPTD_PID; }
	wait $SRPTD_PID; local rc=$?
	check "srptd-verbs (use_srq=$1) exit status 0 ($rc)" test $rc = 0
	grep -q '^panic:\|^fatal error:' "$RUN/srptd-$1.log" && fail "srptd-verbs (use_srq=$1) panicked"
}

srptd_verbs_start false
lio_start 256 rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
lport=$(gid0 rxe0 | cut -d: -f5-8)
# the same add_target string serves both targets, the port aside
check "srptd's login_info names ib_srpt's service GUID $guid" \
	test "$SRPTD_INFO" = "id_ext=$guid,ioc_guid=$guid,dest=$ADDR"

# vpd83 DISK NAME: the target port designators of VPD page 83h in
# $RUN/vpd83-NAME (sg_vpd's "Relative target port" and "SCSI name string").
vpd83() {
	timeout 30 sg_vpd -p 0x83 "$1" >"$RUN/vpd83-$2.txt" 2>&1 || fail "sg_vpd -p 0x83 ($2)"
	cat "$RUN/vpd83-$2.txt"
	sed -n 's/.*Relative target port: *\(0x[0-9a-fA-F]*\).*/\1/p' "$RUN/vpd83-$2.txt" | head -1 >"$RUN/rtp-$2"
	# the first SCSI name string is the target port's (then the device's)
	awk '/SCSI name string:/ {s = $0; sub(/.*SCSI name string: */, "", s); if (s == "") {getline; s = $0}
		gsub(/^ +| +$/, "", s); print s; exit}' "$RUN/vpd83-$2.txt" >"$RUN/name-$2"
}

declare -A v
measure() { # NAME PORT
	local t=$1 disk common
	disk=$(srp_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$RXE_IP:$2")") || { fail "login to $t"; return; }
	log "=== $t ($disk)"
	[ "$t" = srptd ] || [ "$t" = lio ] && vpd83 "$disk" "$t"
	common=(--filename="$disk" --direct=1 --ioengine=libaio --runtime="$SECS" --time_based --size=256M)
	# Fill the measured 256 MiB first (not timed): LIO's rd_mcp allocates
	# its pages when it is configured, srptd's RAM LUN on first write, so
	# without it srptd's reads would read holes and its writes allocate.
	fio_run $t-fill --filename="$disk" --direct=1 --ioengine=libaio --size=256M --rw=write --bs=1M --iodepth=4 || fail "$t fill"
	fio_run $t-rr "${common[@]}" --rw=randread --bs=4k --iodepth=32 && v[$t-rr]=$(fio_field $t-rr 8) || fail "$t randread"
	fio_run $t-sr "${common[@]}" --rw=read --bs=1M --iodepth=4 && v[$t-sr]=$(fio_field $t-sr 7) || fail "$t seq read"
	check "$t logout" srp_logout
}
measure srptd $PORT
measure lio $LIO_PORT
srptd_verbs_stop false

log "=== VPD 83h target port designators: srptd-verbs vs LIO on rxe0 (ib_srpt port $lport)"
check "LIO reports a relative target port ($(cat "$RUN/rtp-lio"))" test -s "$RUN/rtp-lio"
check "srptd's relative target port $(cat "$RUN/rtp-srptd") is LIO's $(cat "$RUN/rtp-lio")" \
	test "$(cat "$RUN/rtp-srptd")" = "$(cat "$RUN/rtp-lio")"
log "LIO's SCSI name string: '$(cat "$RUN/name-lio")' (ib_srpt port $lport, tag 1)"
# the name srptd computes for rxe0's port (cmd/srptd targetPortName) is the
# one LIO reports: ib_srpt's GID-form name, whichever form configfs used
gidname=$(sed -n 's/.*msg="verbs device".* srpt_port_gid=\([^ ]*\).*/\1/p' "$RUN/srptd-false.log" | head -1)
check "LIO's target port SCSI name string is srptd's srpt_port_gid $gidname with tag 1" \
	test "$(cat "$RUN/name-lio")" = "$gidname,t,0x0001"
if [ -s "$RUN/name-srptd" ]; then
	check "srptd's SCSI name string '$(cat "$RUN/name-srptd")' is LIO's" \
		test "$(cat "$RUN/name-srptd")" = "$(cat "$RUN/name-lio")"
else
	log "note: srptd reports no SCSI name string designator in VPD 83h"
fi

log "=== shared receive queues: srptd use_srq = true, LIO attrib/use_srq = 1"
srptd_verbs_start true
attr=$CFG/srpt/$lport/$lport/attrib/use_srq
echo 1 >"$attr" || fail "LIO: echo 1 > $attr"
check "LIO use_srq is on" test "$(cat "$attr")" = 1
measure srptd-srq $PORT
measure lio-srq $LIO_PORT
srptd_verbs_stop true

ratio() { awk -v a="${v[$1]:-0}" -v b="${v[$2]:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
printf '%-32s %10s %10s %7s\n' "fio on rxe0 (${SECS}s, TCG)" srptd-verbs LIO ratio
for q in "" -srq; do
	printf '%-32s %10s %10s %7s\n' "4k randread QD32 IOPS${q:+ (SRQ)}" "${v[srptd$q-rr]:-?}" "${v[lio$q-rr]:-?}" "$(ratio srptd$q-rr lio$q-rr)"
	printf '%-32s %10s %10s %7s\n' "1M seq read QD4 KiB/s${q:+ (SRQ)}" "${v[srptd$q-sr]:-?}" "${v[lio$q-sr]:-?}" "$(ratio srptd$q-sr lio$q-sr)"
done
figure verbs-randread-iops "${v[srptd-rr]:-?}/${v[lio-rr]:-?}=$(ratio srptd-rr lio-rr)"
figure verbs-seqread-KiBps "${v[srptd-sr]:-?}/${v[lio-sr]:-?}=$(ratio srptd-sr lio-sr)"
figure verbs-srq-randread-iops "${v[srptd-srq-rr]:-?}/${v[lio-srq-rr]:-?}=$(ratio srptd-srq-rr lio-srq-rr)"
figure verbs-srq-seqread-KiBps "${v[srptd-srq-sr]:-?}/${v[lio-srq-sr]:-?}=$(ratio srptd-srq-sr lio-srq-sr)"
finish
