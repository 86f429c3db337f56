#!/bin/bash
# summary: fio 4 KiB randread QD32, 1 MiB seq read and write: srptd vs LIO over siw, same VM, ratios; srptd again with GOMAXPROCS=1
# timeout: 600
# Both through kernel ib_srp over siw: srptd at 192.0.2.2:5556, LIO (rd_mcp)
# at [2001:db8::2]:5555.  TCG numbers only compare A with B in one run.
# Then srptd once more with GOMAXPROCS=1 (one thread running Go code): in a
# 2-CPU guest that also runs siw, ib_srp and fio, the Go scheduler's idle
# second thread spinning for work costs the kernel side CPU.
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
SECS=${PERF_SECONDS:-10}

siw_up || die "siw0 did not come up"
srptd_start || die "srptd did not start"
lio_start 512 siw0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
declare -A v
cat >"$RUN/srptd-1p" <<'SH'
#!/bin/sh
GOMAXPROCS=1 exec srptd "$@"
SH
chmod +x "$RUN/srptd-1p"
for t in srptd lio srptd1p; do
	if [ $t = srptd1p ]; then
		check "srptd stops cleanly" srptd_stop
		SRPTD_BIN=$RUN/srptd-1p srptd_start || die "srptd (GOMAXPROCS=1) did not start"
	fi
	if [ $t != lio ]; then
		disk=$(srptd_login) || die "login to $t"
	else
		disk=$(lio_login siw0 "$(srp_string siw0 "$guid" "$guid" "[$SIW_IP6]:$LIO_PORT")") || die "login to LIO"
	fi
	log "=== $t ($disk)"
	common=(--filename="$disk" --direct=1 --ioengine=libaio --runtime="$SECS" --time_based --size=256M)
	# Fill the measured 256 MiB first (not timed): LIO's rd_mcp allocates
	# its pages when it is configured, srptd's RAM LUN on first write, so
	# without it srptd's reads would read holes and its writes allocate.
	fio_run $t-fill --filename="$disk" --direct=1 --ioengine=libaio --size=256M --rw=write --bs=1M --iodepth=4 || fail "$t fill"
	fio_run $t-rr "${common[@]}" --rw=randread --bs=4k --iodepth=32 && v[$t-rr]=$(fio_field $t-rr 8) || fail "$t randread"
	fio_run $t-sw "${common[@]}" --rw=write --bs=1M --iodepth=4 && v[$t-sw]=$(fio_field $t-sw 48) || fail "$t seq write"
	fio_run $t-sr "${common[@]}" --rw=read --bs=1M --iodepth=4 && v[$t-sr]=$(fio_field $t-sr 7) || fail "$t seq read"
	check "$t logout" srp_logout
done
ratio() { awk -v a="${v[${2:-srptd}-$1]:-0}" -v b="${v[lio-$1]:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
printf '%-28s %10s %10s %7s %10s %7s\n' "fio (${SECS}s, TCG)" srptd LIO ratio "srptd 1P" ratio
for j in "rr 4k randread QD32 IOPS" "sr 1M seq read QD4 KiB/s" "sw 1M seq write QD4 KiB/s"; do
	k=${j%% *}
	printf '%-28s %10s %10s %7s %10s %7s\n' "${j#* }" "${v[srptd-$k]:-?}" "${v[lio-$k]:-?}" "$(ratio $k)" "${v[srptd1p-$k]:-?}" "$(ratio $k srptd1p)"
done
figure randread-iops "${v[srptd-rr]:-?}/${v[lio-rr]:-?}=$(ratio rr)"
figure seqread-KiBps "${v[srptd-sr]:-?}/${v[lio-sr]:-?}=$(ratio sr)"
figure seqwrite-KiBps "${v[srptd-sw]:-?}/${v[lio-sw]:-?}=$(ratio sw)"
figure 1p-randread-seqread-seqwrite "$(ratio rr srptd1p)/$(ratio sr srptd1p)/$(ratio sw srptd1p)"
check "srptd stops cleanly" srptd_stop
finish
