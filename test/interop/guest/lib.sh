# Helpers for the interop tests; they run inside the guest.  Source it:
#   . /gosrp/suite/guest/lib.sh
#
# Fixed addressing (the guest has no NIC; nothing leaves the VM):
#   lab0  dummy, MAC 02:00:00:00:00:01, 192.0.2.1/24     -> rxe0 (soft-RoCE)
#   lab1  dummy, MAC 02:00:00:00:00:02, 192.0.2.2/24 and
#         2001:db8::2/64                                 -> siw0 (soft-iWARP)
# siw cannot sit on lo (a zero MAC gives a zero GID, which the IB core's GID
# cache never stores), and not next to rxe0 on lab0 (RDMA/CM maps an address
# to the first device holding it).  LIO ib_srpt listens for RDMA/CM on port
# 5555 on the IPv6 wildcard; over iWARP an IPv4 connection to that listener
# is rejected, so kernel and user-space initiators reach LIO over siw at
# [2001:db8::2]:5555.  A user-space target listens on 192.0.2.2 on another port.
set -o pipefail

RXE_IP=192.0.2.1
SIW_IP=192.0.2.2
SIW_IP6=2001:db8::2
SIW_IP6_FULL=2001:0db8:0000:0000:0000:0000:0000:0002   # as ib_srpt names sessions (%pIS)
LIO_PORT=5555
RUN=/gosrp/run
CFG=/sys/kernel/config/target

log() { printf '[%s] %s\n' "$(cut -d' ' -f1 /proc/uptime)" "$*"; }

# Failure accounting: check DESC CMD... runs CMD and records a failure.
FAILS=0
fail() { log "FAIL: $*"; FAILS=$((FAILS + 1)); }
check() {
	local d=$1
	shift
	if "$@"; then log "ok: $d"; else fail "$d (exit $?)"; fi
}
# finish: prints the verdict and exits with the test's status.
finish() {
	if [ "$FAILS" = 0 ]; then log "RESULT: PASS"; exit 0; fi
	log "RESULT: FAIL ($FAILS failed checks)"
	exit 1
}
# skip REASON: the test cannot run here (exit 77).
skip() { log "SKIP: $*"; exit 77; }
# die REASON: a setup step failed; nothing after it can run.
die() {
	log "FAIL: $*"
	dmesg | tail -n 30
	log "RESULT: FAIL"
	exit 1
}

# figure KEY VALUE: a number for run.sh's summary table.
figure() { echo "$1=$2" >>"$RUN/figures"; log "figure $1=$2"; }

# wait_for DECISECONDS CMD...: polls CMD until it succeeds.  The arguments
# are expanded once, by the caller: a condition on a command's output needs a
# function, or eval '[ -z "$(cmd)" ]'.
wait_for() {
	local n=$1 i
	shift
	for ((i = 0; i < n; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

dummy_up() { # NAME MAC IPv4
	[ -e "/sys/class/net/$1" ] && return 0
	modprobe dummy numdummies=0 &&
		ip link add "$1" type dummy &&
		ip link set "$1" address "$2" &&
		ip addr add "$3/24" dev "$1" &&
		ip link set "$1" up
}

rdma_core_up() { modprobe ib_core && modprobe ib_uverbs && modprobe rdma_ucm && modprobe ib_umad; }

rxe_up() {
	rdma_core_up && modprobe rdma_rxe && dummy_up lab0 02:00:00:00:00:01 $RXE_IP || return 1
	[ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev lab0 || return 1
	wait_for 100 grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state
}

siw_up() {
	rdma_core_up && modprobe siw && dummy_up lab1 02:00:00:00:00:02 $SIW_IP || return 1
	ip -6 addr show dev lab1 | grep -q " $SIW_IP6/" || ip -6 addr add "$SIW_IP6/64" dev lab1 nodad || return 1
	[ -e /sys/class/infiniband/siw0 ] || rdma link add siw0 type siw netdev lab1 || return 1
	wait_for 100 grep -q ACTIVE /sys/class/infiniband/siw0/ports/1/state
}

gid0() { cat "/sys/class/infiniband/$1/ports/1/gids/0"; }

# LIO ib_srpt with one rd_mcp LUN of SIZE_MB on each DEV:
#   lio_start SIZE_MB DEV...
# The ib_srpt port of a device is named by the interface-id half of its GID 0
# ("%04x:%04x:%04x:%04x").  ib_srpt has no demo mode; over RDMA/CM a
# session is named by the target's own address, so the ACLs are our addresses.
lio_start() {
	local mb=$1 dev port acl lun=$CFG/core/rd_mcp_0/lun0
	shift
	modprobe target_core_mod && modprobe ib_srpt || return 1
	mkdir -p $lun && echo "rd_pages=$((mb * 256))" >$lun/control &&
		echo lio-lun0 >$lun/wwn/vpd_unit_serial && echo 1 >$lun/enable || return 1
	mkdir -p $CFG/srpt && echo $LIO_PORT >$CFG/srpt/discovery_auth/rdma_cm_port || return 1
	for dev in "$@"; do
		port=$(gid0 "$dev" | cut -d: -f5-8)
		mkdir -p "$CFG/srpt/$port/$port/lun/lun_0" &&
			ln -s $lun "$CFG/srpt/$port/$port/lun/lun_0/lun0" || return 1
		for acl in $RXE_IP $SIW_IP $SIW_IP6_FULL; do
			mkdir -p "$CFG/srpt/$port/$port/acls/$acl/lun_0" &&
				ln -s "$CFG/srpt/$port/$port/lun/lun_0" "$CFG/srpt/$port/$port/acls/$acl/lun_0/lun0" || return 1
		done
		echo 1 >"$CFG/srpt/$port/$port/enable" || return 1
		log "LIO ib_srpt: $dev port $port, ${mb} MiB rd_mcp LUN, RDMA/CM port $LIO_PORT"
	done
}
# The target port id halves ib_srpt accepts (its srpt_service_guid), 16 hex digits.
lio_guid() { printf '%016x' "$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)"; }

# add_target string for the kernel initiator: srp_string DEV ID_EXT IOC_GUID DEST [EXTRA]
srp_string() {
	local g
	g=$(gid0 "$1" | tr -d :)
	echo "id_ext=$2,ioc_guid=$3,initiator_ext=${g:0:16},dest=$4${5:+,$5}"
}

# srp_login DEV STRING: logs ib_srp in through DEV and prints the new disk
# (/dev/sdX).  Bounded: 60 s for the disk to appear.
srp_login() {
	local dev=$1 s=$2 p before h d i
	modprobe sd_mod && modprobe sg && modprobe ib_srp || return 1
	p=/sys/class/infiniband_srp/srp-$dev-1/add_target
	wait_for 50 test -e "$p" || { log "$p missing" >&2; return 1; }
	before=$(ls /sys/class/scsi_host/)
	log "echo $s > $p" >&2
	echo "$s" >"$p" || { log "add_target failed" >&2; return 1; }
	for ((i = 0; i < 600; i++)); do
		for h in /sys/class/scsi_host/*; do
			grep -qx "${h##*/}" <<<"$before" && continue
			for d in "$h"/device/target*/*/block/*; do
				[ -e "$d" ] && { echo "/dev/${d##*/}"; return 0; }
			done
		done
		sleep 0.1
	done
	log "no disk appeared after login" >&2
	return 1
}

# The sg node of a disk: sg_of /dev/sdX -> /dev/sgN
sg_of() { echo "/dev/$(ls "/sys/block/${1#/dev/}/device/scsi_generic/")"; }

# srp_logout: deletes every SRP remote port and waits (30 s) until they are
# gone (ib_srp removes them from a work queue, after the delete returned).
srp_logout() {
	local p
	for p in /sys/class/srp_remote_ports/*; do
		[ -e "$p/delete" ] && echo 1 >"$p/delete"
	done
	wait_for 300 no_srp_ports
}
no_srp_ports() { [ -z "$(ls /sys/class/srp_remote_ports/ 2>/dev/null)" ]; }

# fio_run NAME ARGS...: runs fio (bounded by timeout) on the options given,
# prints its normal report, keeps the terse v3 line in /tmp/fio-NAME.terse.
# Terse fields: 7 read KiB/s, 8 read IOPS, 48 write KiB/s, 49 write IOPS.
fio_run() {
	local name=$1 out rc
	shift
	out=$(timeout 300 fio --name="$name" --output-format=normal,terse --terse-version=3 "$@" 2>&1)
	rc=$?
	grep -v '^3;' <<<"$out" | grep -E 'IOPS=|err=|verify|bad|error|lat \(usec\): min' | sed 's/^/  /'
	grep '^3;' <<<"$out" | tail -1 >"/tmp/fio-$name.terse"
	[ $rc = 0 ] || { grep -v '^3;' <<<"$out" | tail -20; return $rc; }
	grep -q 'err= 0' <<<"$out"
}
fio_field() { cut -d';' -f"$2" "/tmp/fio-$1.terse" | cut -d. -f1; }

# ---------------------------------------------------------------- srptd
# srptd listens on the siw netdev's IPv4 address (LIO's ib_srpt already
# holds port 5555 there when it is loaded).
SRPTD_PORT=5556
SRPTD_ADDR=$SIW_IP:$SRPTD_PORT

# srptd_start [SIZE]: starts srptd (srptd_run) on $SRPTD_ADDR with one RAM
# LUN of SIZE (default 512MiB) in demo mode.  Everything srptd would take
# from its embedded default is spelled out in the config: the listen address
# (the guest's siw address, not a loopback one), demo mode, a RAM LUN (no
# data directory needed).
srptd_start() {
	cat >"$RUN/srptd.toml" <<TOML
[target]
demo_mode = true

[[port]]
name = "siw"
transport = "iwarp"
listen = ["$SRPTD_ADDR"]

[[lun]]
lun = 0
name = "ram0"
backstore = "ram"
size = "${1:-512MiB}"
serial = "gosrp-interop-0"
TOML
	srptd_run "$RUN/srptd.toml"
}

# srptd_run CONFIG: starts srptd in the background on that TOML config (log
# in $SRPTD_LOG, default $RUN/srptd.log), listening on $SRPTD_ADDR whatever
# the config says (--listen), waits (60 s) for the login_info line it
# prints, and sets SRPTD_PID, SRPTD_ID_EXT, SRPTD_IOC_GUID.  When srptd has a
# --data-dir flag, its data directory is $SRPTD_DATA_DIR (default
# /tmp/srptd-data, on the guest's tmpfs).  SRPTD_BIN names another build
# (srptd-verbs).  A restart on the same data directory keeps the identity
# (login string) and appends to the log.
srptd_run() {
	local i s bin=${SRPTD_BIN:-srptd} args=(--config "$1" --listen "$SRPTD_ADDR")
	local slog=${SRPTD_LOG:-$RUN/srptd.log} data=${SRPTD_DATA_DIR:-/tmp/srptd-data} from
	if timeout 10 "$bin" -h 2>&1 | grep -q -- '-data-dir'; then
		mkdir -p "$data" && args+=(--data-dir "$data")
	fi
	[ -e "$slog" ] || : >"$slog"
	from=$(($(wc -l <"$slog") + 1))
	log "$bin ${args[*]}"
	"$bin" "${args[@]}" >>"$slog" 2>&1 &
	SRPTD_PID=$!
	for ((i = 0; i < 600; i++)); do
		s=$(tail -n +"$from" "$slog" | grep -o 'login_info: id_ext=[0-9a-fA-Fx]*,ioc_guid=[0-9a-fA-Fx]*' | head -1)
		[ -n "$s" ] && break
		kill -0 $SRPTD_PID 2>/dev/null || { log "srptd exited:"; tail -n +"$from" "$slog"; return 1; }
		sleep 0.1
	done
	[ -n "$s" ] || { log "srptd printed no login_info in 60 s:"; tail -n +"$from" "$slog"; return 1; }
	SRPTD_ID_EXT=$(sed 's/.*id_ext=\(0x\)\{0,1\}\([0-9a-fA-F]*\),.*/\2/' <<<"$s")
	SRPTD_IOC_GUID=$(sed 's/.*ioc_guid=\(0x\)\{0,1\}\([0-9a-fA-F]*\)$/\2/' <<<"$s")
	log "srptd pid $SRPTD_PID on $SRPTD_ADDR: id_ext=$SRPTD_ID_EXT ioc_guid=$SRPTD_IOC_GUID"
}

# srptd_stop: SIGTERM, then waits (30 s) for it to exit; fails on a non-zero
# exit status or a Go panic in its log.
srptd_stop() {
	local i rc
	[ -n "${SRPTD_PID:-}" ] || return 0
	kill -TERM "$SRPTD_PID" 2>/dev/null
	for ((i = 0; i < 300; i++)); do kill -0 "$SRPTD_PID" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$SRPTD_PID" 2>/dev/null; then
		log "srptd did not exit within 30 s of SIGTERM; killing it"
		kill -QUIT "$SRPTD_PID"; sleep 1; kill -KILL "$SRPTD_PID" 2>/dev/null
		wait "$SRPTD_PID"; SRPTD_PID=
		return 1
	fi
	wait "$SRPTD_PID"; rc=$?
	SRPTD_PID=
	! grep -q '^panic:\|^fatal error:' "${SRPTD_LOG:-$RUN/srptd.log}" || { log "srptd panicked"; return 1; }
	[ $rc = 0 ] || [ $rc = 143 ] || { log "srptd exited with status $rc"; return 1; }
}

# srptd_login: ib_srp over siw0 to srptd; prints the disk.
srptd_login() {
	srp_login siw0 "$(srp_string siw0 "$SRPTD_ID_EXT" "$SRPTD_IOC_GUID" "$SRPTD_ADDR" "$@")"
}

# lio_login DEV STRING: srp_login to LIO ib_srpt, with ONE retry that is
# logged and counted (figure lio-login-retries).  Over siw the kernel's own
# pair (ib_srp active, ib_srpt passive) now and then fails a login with
# "Sending CM REQ failed" (RDMA_CM_EVENT_CONNECT_ERROR) although ib_srpt
# accepted it; that is not what these tests check.  Logins to srptd never
# retry.
LIO_RETRIES=0
lio_login() {
	local d
	d=$(srp_login "$@") && { echo "$d"; return 0; }
	LIO_RETRIES=$((LIO_RETRIES + 1))
	log "RETRY: kernel login to LIO over $1 failed; dmesg:" >&2
	dmesg | tail -n 8 >&2
	figure lio-login-retries $LIO_RETRIES >&2
	sleep 2   # a failed add_target leaves no remote port behind
	srp_login "$@"
}

# ------------------------------------------------------- srpctl vs LIO
# srpctl_lio_checks SRPCTL TARGET MB GUID SPEC...: the checks of srpctl (or
# srpctl-verbs) against LIO ib_srpt with lio_start's MB MiB rd_mcp LUN,
# shared by srpctl-lio and verbs-srpctl-lio.  TARGET is srpctl's target
# string, GUID ib_srpt's service GUID (lio_guid).  Every srpctl call is one
# login and one logout (60 s bound each):
#   login: target port ID = GUID || GUID (srpt_service_guid twice);
#   inquiry: vendor LIO-ORG, product RAMDISK-MCP, VPD 0x80 = lio-lun0;
#   readcap: 512-byte blocks, MB * 2048 of them;
#   per SPEC name:lba:blocks, WRITE(10) of random data, READ(10), compared;
#   ABORT TASK of an unknown tag answered, LOGICAL UNIT RESET succeeds, data
#   intact;
#   kernel ib_srp over rxe0 then reads every SPEC's blocks and compares
#   (an independent reader of what srpctl wrote).
# Failures are counted (fail); a failed first login ends the test (die).
srpctl_lio_checks() {
	local bin=$1 t=$2 mb=$3 guid=$4 out rc spec name lba blocks w r disk first=
	shift 4
	sc() { timeout 60 "$bin" "$@"; }
	log "=== $bin login $t"
	out=$(sc login "$t" 2>&1); rc=$?
	echo "$out"
	[ $rc = 0 ] || die "$bin login to LIO failed"
	# ib_srpt's target port id is service_guid || service_guid (reference/linux-srp.md)
	grep -q "target port ID *$guid$guid" <<<"$out" || fail "login: target port ID is not $guid$guid"

	log "=== inquiry"
	out=$(sc inquiry "$t" 2>&1); rc=$?
	echo "$out"
	check "inquiry" test $rc = 0
	grep -q '^vendor *LIO-ORG' <<<"$out" || fail "inquiry: vendor is not LIO-ORG"
	grep -q '^product *RAMDISK-MCP' <<<"$out" || fail "inquiry: product is not RAMDISK-MCP"
	out=$(sc inquiry --vpd 0x80 "$t" 2>&1) && grep -q 'lio-lun0' <<<"$out" ||
		{ echo "$out"; fail "VPD 0x80 lacks the unit serial lio-lun0"; }

	log "=== readcap"
	out=$(sc readcap "$t" 2>&1); rc=$?
	echo "$out"
	check "readcap" test $rc = 0
	grep -q "^block size *512$" <<<"$out" || fail "readcap: block size is not 512"
	grep -q "^blocks *$((mb * 2048))$" <<<"$out" || fail "readcap: not $((mb * 2048)) blocks"

	for spec in "$@"; do
		IFS=: read -r name lba blocks <<<"$spec"
		[ -n "$first" ] || first=$spec
		log "=== verified write/read $name at LBA $lba"
		head -c $((blocks * 512)) /dev/urandom >"/tmp/w-$name"
		w=$(cdb10 0x2a "$lba" "$blocks") r=$(cdb10 0x28 "$lba" "$blocks")
		check "WRITE(10) $name ($w)" sc scsi "$t" "$w" --out "/tmp/w-$name"
		sc scsi "$t" "$r" --in $((blocks * 512)) --binary >"/tmp/r-$name" || fail "READ(10) $name ($r)"
		check "$bin read-back $name" cmp "/tmp/w-$name" "/tmp/r-$name"
	done

	log "=== TMFs"
	# ABORT TASK SET: LIO does not implement it (target_tmr_work), so
	# ib_srpt answers FUNCTION FAILED (5); srptd answers FUNCTION COMPLETE.
	# Either way the SRP_RSP must come back and be named.
	out=$(sc tmf "$t" abort-task-set 2>&1); rc=$?
	echo "$out (exit $rc)"
	grep -qiE 'abort task set.*(function complete|function failed)' <<<"$out" || fail "tmf abort-task-set: no response"
	out=$(sc tmf "$t" lun-reset 2>&1); rc=$?
	echo "$out (exit $rc)"
	check "tmf lun-reset answered" test $rc = 0
	# after a LUN reset LIO reports a unit attention once per I_T nexus; each
	# srpctl call is a new nexus, so the data must simply still be there
	IFS=: read -r name lba blocks <<<"$first"
	sc scsi "$t" "$(cdb10 0x28 "$lba" "$blocks")" --in $((blocks * 512)) --binary >/tmp/r-after-reset &&
		cmp "/tmp/w-$name" /tmp/r-after-reset || fail "data after lun-reset"

	log "=== cross-check: kernel ib_srp over rxe reads what $bin wrote"
	disk=$(lio_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$RXE_IP:$LIO_PORT")") || die "kernel login over rxe0"
	for spec in "$@"; do
		IFS=: read -r name lba blocks <<<"$spec"
		check "kernel read-back $name" cmp "/tmp/w-$name" \
			<(timeout 30 dd if="$disk" bs=512 skip="$lba" count="$blocks" iflag=direct status=none)
	done
	check "kernel logout" srp_logout
}

# cdb10 OPCODE LBA BLOCKS: a READ(10)/WRITE(10) CDB in hex bytes: opcode,
# flags 0, 4-byte LBA, group 0, 2-byte transfer length, control 0 (SBC-3).
cdb10() { printf '%02x 00 %02x %02x %02x %02x 00 %02x %02x 00' "$1" \
	$(($2 >> 24 & 255)) $(($2 >> 16 & 255)) $(($2 >> 8 & 255)) $(($2 & 255)) $(($3 >> 8 & 255)) $(($3 & 255)); }
