#!/bin/bash
# summary: CPU profile of srptd (Go pprof, in the run's log directory) during fio 1 MiB seq write QD4 and 4 KiB randread QD32 through ib_srp over siw
# timeout: 600
# Not a pass/fail comparison: it leaves srptd-write.http and
# srptd-randread.http (HTTP responses of srptd's /debug/pprof/profile)
# beside the logs; the profile is the body after the header's blank line:
#   python3 -c 'import sys; d=open(sys.argv[1],"rb").read(); open(sys.argv[2],"wb").write(d.split(b"\r\n\r\n",1)[1])' srptd-write.http w.pprof
#   go tool pprof -top srptd w.pprof
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
SECS=${PERF_SECONDS:-12}

cat >"$RUN/srptd-pprof" <<'SH'
#!/bin/sh
exec srptd --pprof 127.0.0.1:6060 "$@"
SH
chmod +x "$RUN/srptd-pprof"
siw_up || die "siw0 did not come up"
SRPTD_BIN=$RUN/srptd-pprof srptd_start || die "srptd did not start"
disk=$(srptd_login) || die "login to srptd"
common=(--filename="$disk" --direct=1 --ioengine=libaio --size=256M)
fio_run fill "${common[@]}" --rw=write --bs=1M --iodepth=4 || fail "fill"
# profile NAME FIO-ARGS...: fio runs SECS s; the profile covers SECS-4 s of it.
profile() {
	local name=$1 pid
	shift
	fio --name="$name" "${common[@]}" --runtime="$SECS" --time_based "$@" >"$RUN/fio-$name.txt" 2>&1 &
	pid=$!
	sleep 2
	exec 3<>/dev/tcp/127.0.0.1/6060 || { fail "pprof connection"; return; }
	printf 'GET /debug/pprof/profile?seconds=%d HTTP/1.0\r\nHost: x\r\n\r\n' $((SECS - 4)) >&3
	cat <&3 >"$RUN/srptd-$name.http"
	exec 3<&-
	wait $pid
	grep -E 'IOPS=' "$RUN/fio-$name.txt" | sed 's/^/  /'
	check "$name profile received" grep -q '^HTTP/1.[01] 200' "$RUN/srptd-$name.http"
}
profile write --rw=write --bs=1M --iodepth=4
profile randread --rw=randread --bs=4k --iodepth=32
check "logout" srp_logout
check "srptd stops cleanly" srptd_stop
finish
