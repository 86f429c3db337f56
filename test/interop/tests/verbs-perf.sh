#!/bin/bash
# summary: fio 4 KiB randread QD32 and 1 MiB seq read: srptd-verbs vs LIO ib_srpt, both on rxe0 in one VM, ratios
# timeout: 600
# Both through kernel ib_srp over soft-RoCE: srptd-verbs at 192.0.2.1:5556,
# LIO (rd_mcp) at 192.0.2.1:5555.  TCG numbers only compare A with B in one
# run.
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
cat >"$RUN/srptd.toml" <<TOML
[target]
demo_mode = true

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
: >"$RUN/srptd.log"
srptd-verbs -config "$RUN/srptd.toml" >>"$RUN/srptd.log" 2>&1 &
SRPTD_PID=$!
wait_for 600 grep -q '^login_info: ' "$RUN/srptd.log" || { cat "$RUN/srptd.log"; die "srptd-verbs printed no login_info"; }
info=$(grep -m1 '^login_info: ' "$RUN/srptd.log" | sed 's/^login_info: //')
log "srptd-verbs: $info"
lio_start 256 rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
# the same add_target string serves both targets, the port aside
check "srptd's login_info names ib_srpt's service GUID $guid" \
	test "$info" = "id_ext=$guid,ioc_guid=$guid,dest=$ADDR"

declare -A v
for t in srptd lio; do
	port=$PORT
	[ $t = lio ] && port=$LIO_PORT
	disk=$(srp_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$RXE_IP:$port")") || die "login to $t"
	log "=== $t ($disk)"
	common=(--filename="$disk" --direct=1 --ioengine=libaio --runtime="$SECS" --time_based --size=256M)
	fio_run $t-rr "${common[@]}" --rw=randread --bs=4k --iodepth=32 && v[$t-rr]=$(fio_field $t-rr 8) || fail "$t randread"
	fio_run $t-sr "${common[@]}" --rw=read --bs=1M --iodepth=4 && v[$t-sr]=$(fio_field $t-sr 7) || fail "$t seq read"
	check "$t logout" srp_logout
done
ratio() { awk -v a="${v[srptd-$1]:-0}" -v b="${v[lio-$1]:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
printf '%-30s %10s %10s %7s\n' "fio on rxe0 (${SECS}s, TCG)" srptd-verbs LIO ratio
printf '%-30s %10s %10s %7s\n' "4k randread QD32 IOPS" "${v[srptd-rr]:-?}" "${v[lio-rr]:-?}" "$(ratio rr)"
printf '%-30s %10s %10s %7s\n' "1M seq read QD4 KiB/s" "${v[srptd-sr]:-?}" "${v[lio-sr]:-?}" "$(ratio sr)"
figure verbs-randread-iops "${v[srptd-rr]:-?}/${v[lio-rr]:-?}=$(ratio rr)"
figure verbs-seqread-KiBps "${v[srptd-sr]:-?}/${v[lio-sr]:-?}=$(ratio sr)"

kill -TERM $SRPTD_PID
wait_for 300 sh -c "! kill -0 $SRPTD_PID 2>/dev/null" || { kill -QUIT $SRPTD_PID; sleep 1; kill -KILL $SRPTD_PID; }
wait $SRPTD_PID; rc=$?
check "srptd-verbs exit status 0 ($rc)" test $rc = 0
grep -q '^panic:\|^fatal error:' "$RUN/srptd.log" && fail "srptd-verbs panicked"
finish
