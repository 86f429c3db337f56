#!/bin/bash
# summary: kernel ib_srp -> two srptd ALUA gateways of one file LU, dm-multipath (scsi_dh_alua, group_by_prio) under fio verify while each gateway is killed with SIGKILL and restarted
# timeout: 420
# Two srptd gateways in the guest export one file image as the same logical
# unit (serial, NAA) with ALUA (docs/CEPH.md "Several gateways"): gateway A
# is target port group 1 (relative port 1) active/optimized and preferred,
# gateway B group 2 (relative port 2) active/non-optimized. The kernel's
# ib_srp logs in to both over siw; scsi_dh_alua attaches to both disks and
# multipathd (multipath-tools, prio alua, group_by_prio, hardware handler
# alua, failback immediate) makes one map of two path groups. fio writes
# random 4 KiB blocks with crc32c headers through the map while A is killed
# with SIGKILL (I/O moves to B) and restarted (ib_srp reconnects, multipathd
# reinstates the path and fails back to A), then B likewise; fio's verify
# pass reads every block back. Checks: scsi_dh_alua's view of each port
# group in dmesg, `multipath -ll` (two groups, their priorities, the failed
# path, the path back), 0 fio errors. Figures: the longest pause in fio's
# completions around the kill of A, IOPS in the seconds after it, the time
# from A's restart to failback, multipath priorities.
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
command -v multipathd >/dev/null || skip "multipath-tools not in the guest image"

IMG=/tmp/mpath-lu0.img
WWN=6001405c0a5c5e00000000000000a101 # the LU's NAA 6 designator, as udev and multipathd name it with a 3 before
WWID=3$WWN
RATE=700 # fio's pace, IOPS: 16384 writes take about 23 s, longer than the kills and restarts
declare -A ADDR=([a]=$SIW_IP:5556 [b]=$SIW_IP:5557) PID DISK RPORT

siw_up || die "siw0 did not come up"
# gw_conf NAME GROUP STATE PREFERRED PEER_GROUP PEER_STATE PEER_PREFERRED
gw_conf() {
	cat >"$RUN/srptd-$1.toml" <<TOML
[target]
demo_mode = true

[[port]]
name = "gw$1"
transport = "iwarp"
listen = ["${ADDR[$1]}"]

[[lun]]
lun = 0
name = "shared0"
backstore = "file"
path = "$IMG"
size = "128MiB"
serial = "gosrp-mpath-0"
wwn = "$WWN"

[alua]
group = $2
relative_port = $2
state = "$3"
preferred = $4

[[alua.peer]]
group = $5
state = "$6"
preferred = $7
ports = [$5]
TOML
}
gw_conf a 1 active/optimized true 2 active/non-optimized false
gw_conf b 2 active/non-optimized false 1 active/optimized true
# gw_start NAME: starts (or restarts, same data directory and identity) a gateway.
gw_start() {
	SRPTD_ADDR=${ADDR[$1]} SRPTD_LOG=$RUN/srptd-$1.log SRPTD_DATA_DIR=/tmp/srptd-$1 \
		srptd_run "$RUN/srptd-$1.toml" || return 1
	PID[$1]=$SRPTD_PID
	eval "ID_$1=\$SRPTD_ID_EXT IOC_$1=\$SRPTD_IOC_GUID"
}
gw_kill() {
	log "kill -9 gateway $1 (pid ${PID[$1]})"
	kill -KILL "${PID[$1]}"
	wait "${PID[$1]}" 2>/dev/null
	PID[$1]=
}
# udev names the disks' WWID (ID_SERIAL) for multipathd; udevd runs before the
# logins so it sees their add events.
/lib/systemd/systemd-udevd --daemon || die "systemd-udevd"
modprobe scsi_dh_alua && modprobe dm_multipath && modprobe dm_service_time || die "modprobe dm/alua"
gw_start a || die "gateway A did not start"
gw_start b || die "gateway B did not start"
for g in a b; do
	id=ID_$g ioc=IOC_$g
	DISK[$g]=$(srp_login siw0 "$(srp_string siw0 "${!id}" "${!ioc}" "${ADDR[$g]}")") || die "ib_srp login to gateway $g"
	host=$(ls -d /sys/block/${DISK[$g]#/dev/}/device/scsi_device/* | sed 's|.*/||; s/:.*//')
	RPORT[$g]=$(ls -d /sys/class/srp_remote_ports/port-$host:* | head -1)
	# Reconnect every second; fail I/O on a lost channel after 1 s so
	# dm-multipath retries it on the other path; keep the remote port (and
	# the disk) 120 s for the gateway to come back.
	echo 1 >"${RPORT[$g]}/reconnect_delay" && echo 1 >"${RPORT[$g]}/fast_io_fail_tmo" &&
		echo 120 >"${RPORT[$g]}/dev_loss_tmo" || die "remote port timeouts of $g"
	log "gateway $g: ${DISK[$g]}, ${RPORT[$g]}"
done
SA=${DISK[a]#/dev/} SB=${DISK[b]#/dev/}
timeout 60 udevadm settle || log "udevadm settle timed out"

log "=== scsi_dh_alua's view"
dmesg | grep -E 'alua' | sed 's/^/  /'
for g in a b; do
	d=$(ls /sys/block/${DISK[$g]#/dev/}/device/scsi_device/)
	check "scsi_dh_alua: $g supports implicit and explicit TPGS" grep -q "$d: alua: supports implicit and explicit TPGS" <(dmesg)
	check "scsi_dh_alua attached to $g" grep -qx alua "/sys/block/${DISK[$g]#/dev/}/device/dh_state"
done
# The group of each path as its VPD 83h names it, and its state from REPORT
# TARGET PORT GROUPS: T_SUP, U_SUP, S_SUP, AN_SUP and AO_SUP are set, O_SUP
# and LBD_SUP not ("TolUSNA").
da=$(ls /sys/block/$SA/device/scsi_device/) db=$(ls /sys/block/$SB/device/scsi_device/)
check "scsi_dh_alua: A is port group 1, relative port 1" grep -qE "$da: alua: device .* port group 1 rel port 1$" <(dmesg)
check "scsi_dh_alua: B is port group 2, relative port 2" grep -qE "$db: alua: device .* port group 2 rel port 2$" <(dmesg)
check "scsi_dh_alua: group 1 active/optimized, preferred" grep -q "alua: port group 01 state A preferred supports TolUSNA" <(dmesg)
check "scsi_dh_alua: group 2 active/non-optimized" grep -q "alua: port group 02 state N non-preferred supports TolUSNA" <(dmesg)

cat >/etc/multipath.conf <<'CONF'
defaults {
	user_friendly_names no
	find_multipaths no
	polling_interval 1
}
blacklist {
	devnode "^vd[a-z]"
}
devices {
	device {
		vendor "GOSRP"
		product "DISK"
		path_grouping_policy group_by_prio
		prio alua
		prio_args "exclusive_pref_bit"
		detect_prio no
		hardware_handler "1 alua"
		path_checker tur
		path_selector "service-time 0"
		failback immediate
		no_path_retry 30
	}
}
CONF
log "=== multipathd"
multipathd -d -s -v3 >"$RUN/multipathd.log" 2>&1 &
mpd=$!
# mp_ll: multipath -ll of the map, bounded.
mp_ll() { timeout 20 multipath -ll "$WWID" 2>/dev/null; }
# path_line DEV: the path's line of multipath -ll ("`- 2:0:0:0 sda 8:0 active ready running").
path_line() { mp_ll | grep -E " $1 [0-9]+:[0-9]+ "; }
# group_of DEV: "prio=N status=S" of the path group holding DEV.
group_of() { mp_ll | awk -v d=" $1 " '/policy=/ { g = $0 } index($0, d) { sub(/.*prio=/, "prio=", g); print g; exit }'; }
both_paths() { [ "$(mp_ll | grep -cE ' (sd[a-z]+) [0-9]+:[0-9]+ .*active ready')" = 2 ]; }
wait_for 600 both_paths || { mp_ll; tail -30 "$RUN/multipathd.log"; die "multipathd made no map of two ready paths of $WWID in 60 s"; }
ll=$(mp_ll)
echo "$ll" | sed 's/^/  /'
echo "$ll" >"$RUN/multipath-ll-before.txt"
check "map named by the LU's NAA ($WWID), hardware handler alua" grep -q "hwhandler='1 alua'" <<<"$ll"
check "two path groups" test "$(grep -c 'policy=' <<<"$ll")" = 2
pa=$(group_of "$SA" | sed 's/prio=\([0-9]*\).*/\1/') pb=$(group_of "$SB" | sed 's/prio=\([0-9]*\).*/\1/')
log "priorities: A ($SA) $pa, B ($SB) $pb"
figure mpath-prio-a "$pa"
figure mpath-prio-b "$pb"
# multipath-tools' alua prioritizer: active/optimized 50, active/non-optimized
# 10, and with exclusive_pref_bit +80 for PREF.
check "A's group prio 130 (active/optimized + PREF)" test "$pa" = 130
check "B's group prio 10 (active/non-optimized)" test "$pb" = 10
check "A's group is the active one" grep -q 'status=active' <(group_of "$SA")
check "B's group is enabled, not active" grep -q 'status=enabled' <(group_of "$SB")

# ios DEV: reads and writes completed on a disk (/sys/block/DEV/stat fields
# 1 and 5; fio's verify pass reads).
ios() { awk '{ print $1 + $5 }' "/sys/block/$1/stat"; }
# moves DEV N: DEV completes I/Os beyond N.
moves() { [ "$(ios "$1")" -gt "$2" ]; }
path_failed() { path_line "$1" | grep -q 'failed'; }
path_back() { path_line "$1" | grep -q 'active ready'; }
group_active() { group_of "$1" | grep -q 'status=active'; }

log "=== fio randwrite + crc32c verify on /dev/mapper/$WWID, gateways killed and restarted"
timeout 300 fio --name=mpath --filename="/dev/mapper/$WWID" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
	--iodepth=16 --size=64M --rate_iops=$RATE --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_dump=1 \
	--write_lat_log=/tmp/mpath --log_unix_epoch=1 --output-format=normal >/tmp/fio-mpath.out 2>&1 &
fio_pid=$!
wait_for 100 moves "$SA" "$(ios "$SA")" || fail "fio's writes do not reach A's path"
sleep 2
kill -0 $fio_pid 2>/dev/null || fail "fio ended before the kill of A"
wb=$(ios "$SB")
t_kill=$(cut -d' ' -f1 /proc/uptime) kill_epoch=$(date +%s%3N)
gw_kill a
wait_for 300 moves "$SB" "$wb" && log "ok: I/O moves to B's path" || fail "no I/O reached B within 30 s of A's death"
t_moved=$(cut -d' ' -f1 /proc/uptime)
wait_for 300 path_failed "$SA" || fail "multipath does not show A's path failed within 30 s"
ll=$(mp_ll)
echo "$ll" | sed 's/^/  /'
echo "$ll" >"$RUN/multipath-ll-a-down.txt"
check "B's group active while A is down" grep -q 'status=active' <(group_of "$SB")
sleep 1
t_restart=$(cut -d' ' -f1 /proc/uptime)
kill -0 $fio_pid 2>/dev/null || fail "fio ended before A's restart"
gw_start a || die "gateway A did not restart"
wait_for 600 grep -qx running "${RPORT[a]}/state" || fail "ib_srp did not reconnect to A within 60 s ($(cat "${RPORT[a]}/state"))"
wa=$(ios "$SA")
if wait_for 600 path_back "$SA" && wait_for 300 group_active "$SA" && wait_for 100 moves "$SA" "$wa"; then
	t_back=$(cut -d' ' -f1 /proc/uptime)
	log "ok: A's path is back and its group active, I/O through A"
else
	fail "A's path not back and active within 90 s of its restart"
fi
ll=$(mp_ll)
echo "$ll" | sed 's/^/  /'
echo "$ll" >"$RUN/multipath-ll-a-back.txt"
check "A's path active ready after the restart" path_back "$SA"
check "still two path groups" test "$(grep -c 'policy=' <<<"$ll")" = 2
pa2=$(group_of "$SA" | sed 's/prio=\([0-9]*\).*/\1/') pb2=$(group_of "$SB" | sed 's/prio=\([0-9]*\).*/\1/')
log "priorities after failback: A $pa2, B $pb2"
figure mpath-prio-after-failback "$pa2/$pb2"
# When dm-multipath moved the I/O to B's group, scsi_dh_alua asked it
# active/optimized with SET TARGET PORT GROUPS (explicit ALUA; B's gateway
# changes its own group): prio 50. A's PREF keeps it first.
check "scsi_dh_alua made group 2 active/optimized (SET TARGET PORT GROUPS)" grep -q "alua: port group 02 state A non-preferred" <(dmesg)
check "A's group prio 130 after failback" test "$pa2" = 130
check "B's group prio 50 after failback (active/optimized)" test "$pb2" = 50

log "=== gateway B killed and restarted (it carries no I/O now)"
kill -0 $fio_pid 2>/dev/null || log "note: fio's write phase ended before B's kill (the verify reads run through the map)"
gw_kill b
wait_for 300 path_failed "$SB" || fail "multipath does not show B's path failed within 30 s"
gw_start b || die "gateway B did not restart"
wait_for 600 grep -qx running "${RPORT[b]}/state" || fail "ib_srp did not reconnect to B within 60 s"
wait_for 600 path_back "$SB" || fail "B's path not back within 60 s of its restart"
ll=$(mp_ll)
echo "$ll" | sed 's/^/  /'
echo "$ll" >"$RUN/multipath-ll-end.txt"
check "both paths active ready at the end" both_paths
check "A's group active at the end" group_active "$SA"
check "two path groups at the end" test "$(grep -c 'policy=' <<<"$ll")" = 2
# B restarted in its configured state, and nothing activated it since.
check "B's group prio 10 after its restart (active/non-optimized again)" test "$(group_of "$SB" | sed 's/prio=\([0-9]*\).*/\1/')" = 10

wait "$fio_pid"; rc=$?
grep -E 'err=|verify|bad|crc|IOPS' /tmp/fio-mpath.out | sed 's/^/  /'
check "fio write+verify across the kills exits 0" test "$rc" = 0
grep -q 'err= 0' /tmp/fio-mpath.out || fail "fio reported an error"
if grep -qiE 'verify: bad|crc32c: verify failed|bad magic' /tmp/fio-mpath.out; then
	fail "fio verify found a block that does not hold what was acknowledged"
fi

# Completions of the write phase (ddir 1) from fio's latency log, in ms since
# the epoch (as kill_epoch): the longest gap between two, and write IOPS per
# second after the kill.
lat=$(ls /tmp/mpath_clat.*.log 2>/dev/null | head -1)
if [ -n "$lat" ]; then
	awk -F', *' '$3 == 1 { print $1 }' "$lat" | sort -n >/tmp/mpath-wt
	gap=$(awk -v k="$kill_epoch" 'NR > 1 && $1 - p > g { g = $1 - p; at = p - k } { p = $1 } END { printf "%d %d", g, at }' /tmp/mpath-wt)
	log "longest pause in write completions: ${gap% *} ms, beginning ${gap#* } ms after A's kill"
	figure mpath-stall-ms "${gap% *}"
	ips=$(awk -v k="$kill_epoch" '$1 >= k && $1 < k + 5000 { n[int(($1 - k) / 1000)]++ } END { for (i = 0; i < 5; i++) printf "%d%s", n[i], (i < 4 ? "/" : "") }' /tmp/mpath-wt)
	log "write IOPS in the 5 s after A's kill: $ips (paced at $RATE)"
	figure mpath-iops-after-kill "$ips"
else
	fail "fio wrote no latency log"
fi
figure mpath-failover-ms "$(awk -v a="$t_kill" -v b="$t_moved" 'BEGIN { printf "%d", (b - a) * 1000 }')"
[ -z "${t_back:-}" ] || figure mpath-failback-ms "$(awk -v a="$t_restart" -v b="$t_back" 'BEGIN { printf "%d", (b - a) * 1000 }')"
figure mpath-fio-write-iops "$(grep -o 'write: IOPS=[0-9.k]*' /tmp/fio-mpath.out | head -1 | cut -d= -f2)"
dmesg | grep -E 'alua|device-mapper: multipath' | tail -20 | sed 's/^/  /'

log "=== teardown"
kill "$mpd" 2>/dev/null; wait "$mpd" 2>/dev/null
timeout 30 multipath -F >/dev/null 2>&1 || timeout 30 dmsetup remove "$WWID" || fail "removing the map"
if ! srp_logout; then
	fail "logout"
	for p in /sys/class/srp_remote_ports/*; do log "left: $p state $(cat "$p/state" 2>/dev/null)"; done
	dmsetup ls
	for p in /proc/[0-9]*; do
		grep -q '^State:.*D' "$p/status" 2>/dev/null && { log "blocked: $(cat "$p/comm") ${p#/proc/}"; cat "$p/stack" 2>/dev/null; }
	done
fi
for g in a b; do
	SRPTD_PID=${PID[$g]} SRPTD_LOG=$RUN/srptd-$g.log
	check "gateway $g stops cleanly" srptd_stop
done
finish
