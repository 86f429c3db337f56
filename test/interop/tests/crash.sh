#!/bin/bash
# summary: kernel ib_srp -> srptd (file LUN) killed with SIGKILL and restarted under fio verify=crc32c writes: ib_srp reconnects, nothing acknowledged is lost
# timeout: 900
# Campaign 1 from the kernel initiator (docs/RELIABILITY.md): fio writes
# random 4 KiB blocks with crc32c verification headers through ib_srp while
# srptd is killed with SIGKILL KILLS times at random moments and restarted
# on the same data directory (same identity, same LUN file). ib_srp holds
# the I/O (fast_io_fail_tmo off), reconnects (reconnect_delay 1 s) and
# re-issues what was in flight; fio's verify pass then reads back every
# block it wrote. Figures: kills, fio errors, verify errors, the longest
# reconnect.
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
KILLS=${KILLS:-6}

siw_up || die "siw0 did not come up"
cat >"$RUN/crash.toml" <<TOML
[target]
demo_mode = true

[[port]]
name = "siw"
transport = "iwarp"
listen = ["$SRPTD_ADDR"]

[[lun]]
lun = 0
name = "file0"
backstore = "file"
path = "/tmp/crash-lun0.img"
size = "256MiB"
serial = "gosrp-crash-0"
TOML
srptd_run "$RUN/crash.toml" || die "srptd did not start"
disk=$(srptd_login) || die "kernel ib_srp login to srptd failed"
rport=$(ls -d /sys/class/srp_remote_ports/* | head -1)
echo 1 >"$rport/reconnect_delay" || die "reconnect_delay"
echo off >"$rport/fast_io_fail_tmo" || die "fast_io_fail_tmo"
echo 120 >"$rport/dev_loss_tmo" || die "dev_loss_tmo"
log "disk $disk, remote port $rport: reconnect_delay $(cat "$rport/reconnect_delay"), fast_io_fail_tmo $(cat "$rport/fast_io_fail_tmo"), dev_loss_tmo $(cat "$rport/dev_loss_tmo")"

log "=== fio randwrite + crc32c verify while srptd is killed $KILLS times"
timeout 800 fio --name=crash --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
	--iodepth=16 --size=96M --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_dump=1 \
	--output-format=normal >/tmp/fio-crash.out 2>&1 &
fio_pid=$!
kills=0 longest=0
for ((k = 1; k <= KILLS; k++)); do
	sleep "$((1 + RANDOM % 3)).$((RANDOM % 10))"
	kill -0 "$fio_pid" 2>/dev/null || break
	log "kill -9 srptd (pid $SRPTD_PID), kill $k"
	kill -KILL "$SRPTD_PID"; wait "$SRPTD_PID" 2>/dev/null; SRPTD_PID=
	kills=$((kills + 1))
	t0=$(cut -d' ' -f1 /proc/uptime)
	# ib_srp sees the connection go (siw: the dead process's TCP reset).
	wait_for 100 sh -c "! grep -qx running '$rport/state'" || log "ib_srp still running 10 s after the kill"
	srptd_run "$RUN/crash.toml" || die "srptd did not restart"
	wait_for 600 grep -qx running "$rport/state" || { fail "ib_srp did not reconnect within 60 s (state $(cat "$rport/state"))"; break; }
	t1=$(cut -d' ' -f1 /proc/uptime)
	ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", (b - a) * 1000 }')
	log "ib_srp running again ${ms} ms after the restart began"
	[ "$ms" -gt "$longest" ] && longest=$ms
done
wait "$fio_pid"; rc=$?
grep -E 'err=|verify|bad|crc|IOPS' /tmp/fio-crash.out | sed 's/^/  /'
figure crash-kills "$kills"
figure crash-reconnect-max-ms "$longest"
[ "$kills" -gt 0 ] || fail "fio ended before the first kill"
check "fio write+verify across $kills kills exits 0" test "$rc" = 0
grep -q 'err= 0' /tmp/fio-crash.out || fail "fio reported an error"
if grep -qiE 'verify: bad|crc32c: verify failed|bad magic' /tmp/fio-crash.out; then
	fail "fio verify found a block that does not hold what was acknowledged"
fi
check "logout" srp_logout
check "srptd stops cleanly" srptd_stop
finish
