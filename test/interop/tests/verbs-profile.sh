#!/bin/bash
# summary: guest CPU per I/O of srptd-verbs and of LIO on rxe0 (fio 4 KiB randread QD32, 1 MiB read QD4, 1 MiB write QD4), and a Go CPU profile of srptd-verbs in each
# timeout: 900
# Not a pass/fail comparison. For each target and job it logs the guest's
# busy CPU time per I/O (all CPUs, /proc/stat: initiator, rxe and target
# together) and, for srptd-verbs, the process's own share
# (/proc/PID/stat) and its pprof CPU profile, left beside the logs as
# srptd-verbs-NAME.http (the profile is the body after the header's blank
# line; see perf-profile.sh to extract it). When the guest has perf (an
# image built with GOSRP_INTEROP_EXTRA_PKGS=linux-perf) every job, LIO's
# too, is also sampled guest-wide, kernel included, over the same SECS-4 s:
# perf-TARGET-NAME.txt by command, object and symbol, and
# perf-TARGET-NAME-children.txt by symbol with its callees' share,
# perf-TARGET-NAME-comm.txt by command, and perf-TARGET-NAME.script.gz
# (perf script: every sample with its call chain; test/interop/perfsplit
# reads it). srptd's jobs also count its system calls by kind and its
# context switches per thread (perf stat): with the Go profile, that
# instrumentation costs srptd more than LIO, whose jobs get neither.
. /gosrp/suite/guest/lib.sh
command -v srptd-verbs >/dev/null || skip "srptd-verbs not built"
ulimit -l unlimited
SECS=${PERF_SECONDS:-12}
PORT=5556
ADDR=$RXE_IP:$PORT

rxe_up || die "rxe0 did not come up"
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
srptd-verbs -config "$RUN/srptd.toml" --pprof 127.0.0.1:6060 >"$RUN/srptd.log" 2>&1 &
SRPTD_PID=$!
wait_for 600 grep -q '^login_info: ' "$RUN/srptd.log" || { cat "$RUN/srptd.log"; die "srptd-verbs printed no login_info"; }
lio_start 256 rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)

busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; } # user nice system irq softirq, jiffies
pcpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# job TARGET NAME FIO-ARGS...: fio runs SECS s; CPU is counted over it, the
# Go profile (srptd only) and perf over SECS-4 s of it.
job() {
	local t=$1 name=$2 pid b0 b1 p0 p1 ios
	shift 2
	b0=$(busy); p0=$(pcpu $SRPTD_PID)
	fio --name="$t-$name" "${common[@]}" --runtime="$SECS" --time_based \
		--output-format=normal,terse --terse-version=3 "$@" >"$RUN/fio-$t-$name.txt" 2>&1 &
	pid=$!
	sleep 2
	local win=$((SECS - 4)) data=/tmp/perf-$t-$name.data perfpid='' statpids=()
	if command -v perf >/dev/null; then
		perf record -a -g -F 499 -e cpu-clock -o "$data" -- sleep $win \
			>"$RUN/perf-$t-$name.log" 2>&1 &
		perfpid=$!
		# system calls and context switches: srptd's, the whole guest's
		if [ "$t" = srptd ]; then
			local ev=context-switches,raw_syscalls:sys_enter s
			for s in clock_gettime nanosleep clock_nanosleep epoll_pwait futex write read ioctl sched_yield; do
				ev=$ev,syscalls:sys_enter_$s
			done
			perf stat -e "$ev" -p $SRPTD_PID -- sleep $win >"$RUN/perf-$t-$name-stat.txt" 2>&1 &
			statpids+=($!)
			perf stat --per-thread -e context-switches -p $SRPTD_PID -- sleep $win \
				>"$RUN/perf-$t-$name-stat-threads.txt" 2>&1 &
			statpids+=($!)
		fi
		perf stat -a -e context-switches,raw_syscalls:sys_enter -- sleep $win \
			>"$RUN/perf-$t-$name-stat-all.txt" 2>&1 &
		statpids+=($!)
	fi
	if [ "$t" = srptd ]; then
		if exec 3<>/dev/tcp/127.0.0.1/6060; then
			printf 'GET /debug/pprof/profile?seconds=%d HTTP/1.0\r\nHost: x\r\n\r\n' $win >&3
			cat <&3 >"$RUN/srptd-verbs-$name.http"
			exec 3<&-
		fi
	fi
	wait $pid || fail "fio $t-$name"
	# CPU over the job only: perf's reports below take seconds of their own
	b1=$(busy); p1=$(pcpu $SRPTD_PID)
	local sp
	for sp in "${statpids[@]}"; do
		wait "$sp" || log "perf stat of $t $name failed (see perf-$t-$name-stat*.txt)"
	done
	if [ -n "$perfpid" ] && ! wait $perfpid; then
		log "perf record of $t $name failed: $(tail -c 300 "$RUN/perf-$t-$name.log")"
		perfpid=
	fi
	if [ -n "$perfpid" ]; then
		perf report -i "$data" --stdio --no-children --sort comm,dso,sym \
			-g none --percent-limit 0.3 >"$RUN/perf-$t-$name.txt" 2>&1
		perf report -i "$data" --stdio --children --sort sym \
			-g none --percent-limit 1 >"$RUN/perf-$t-$name-children.txt" 2>&1
		perf report -i "$data" --stdio --sort comm \
			-g none >"$RUN/perf-$t-$name-comm.txt" 2>&1
		# every sample with its call chain, for reports of one's own
		perf script -i "$data" -F comm,tid,time,ip,sym,dso 2>"$RUN/perf-$t-$name-script.log" |
			gzip -1 >"$RUN/perf-$t-$name.script.gz"
		rm -f "$data"
	fi
	# terse v3: fields 8 and 9 read IOPS and runtime (ms), 49 and 50 the
	# same of writes
	ios=$(grep '^3;' "$RUN/fio-$t-$name.txt" | tail -1 | awk -F';' '{printf "%d", $8 * $9 / 1000 + $49 * $50 / 1000}')
	grep -E 'IOPS=' "$RUN/fio-$t-$name.txt" | sed 's/^/  /'
	awk -v t="$t" -v n="$name" -v ios="$ios" -v b="$((b1 - b0))" -v p="$((p1 - p0))" -v hz="$(getconf CLK_TCK)" 'BEGIN {
		if (ios > 0) printf "%s %s: %d I/Os, guest CPU %.1f us per I/O, srptd-verbs process %.1f us per I/O\n", t, n, ios, b * 1e6 / hz / ios, p * 1e6 / hz / ios }' |
		while read -r l; do log "$l"; done
}
measure() { # NAME PORT
	local t=$1 disk
	disk=$(srp_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$RXE_IP:$2")") || { fail "login to $t"; return; }
	common=(--filename="$disk" --direct=1 --ioengine=libaio --size=256M)
	fio_run $t-fill "${common[@]}" --rw=write --bs=1M --iodepth=4 || fail "$t fill"
	job $t randread --rw=randread --bs=4k --iodepth=32
	job $t read --rw=read --bs=1M --iodepth=4
	job $t write --rw=write --bs=1M --iodepth=4
	check "$t logout" srp_logout
}
measure srptd $PORT
measure lio $LIO_PORT
kill -TERM $SRPTD_PID
wait $SRPTD_PID
finish
