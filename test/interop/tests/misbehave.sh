#!/bin/bash
# summary: kernel ib_srp -> srptd over siw, refused logins: wrong target port ID (0x10003), no ACL (0x10006), IT IU too large (0x10002); wire, dmesg, add_target and srptd's log agree; then good logins
# timeout: 480
# srptd runs with demo mode off and one ACL, for initiator port ID
# INIT_OK_EXT || siw0's interface ID (ib_srp's initiator port ID is
# initiator_ext || the interface-ID half of the port's GID 0, srp_send_req).
# Each bad login has exactly one fault, so it has exactly one right
# SRP_LOGIN_REJ reason (include/scsi/srp.h; ib_srpt rejects the same three
# cases with the same reasons, srpt_cm_req_recv):
#   wrong-port  id_ext that is not srptd's service GUID: 0x00010003
#               (UNABLE_ASSOCIATE_CHANNEL)
#   no-acl      initiator_ext INIT_BAD_EXT, not in the ACL: 0x00010006
#               (CHANNEL_LIMIT_REACHED)
#   iu-large    req_it_iu_len = max_req_size + 1: 0x00010002
#               (REQ_IT_IU_LENGTH_TOO_LARGE)
# ib_srp's max_it_iu_size only caps the length it computes
# (srp_max_it_iu_len: max(276, 68 + max_imm_data)), so max_imm_data is raised
# first to make the capped value the one sent.
#
# For each, asserted from both sides:
#   wire (tcpdump on the guest): the MPA request carries the SRP login with
#     the intended fault; the MPA reply has the Reject flag (RFC 5044 7.1:
#     0x20) and its private data is an SRP_LOGIN_REJ (opcode 0xc2) with the
#     expected reason, the request's tag and buf_fmt DIRECT|INDIRECT 0x0006;
#   kernel: the add_target write fails with ECONNRESET and no remote port is
#     left; dmesg has ib_srp's "REJ reason 0xffffff98" and "Connection 0/N to
#     192.0.2.2 failed".  Over iWARP, siw reports a reject as a connect reply
#     with status -ECONNRESET (siw_proc_mpareply); ib_srp's
#     srp_rdma_cm_rej_handler decodes the SRP_LOGIN_REJ only for the IB CM
#     status IB_CM_REJ_CONSUMER_DEFINED, so over iWARP it prints the status,
#     never "SRP LOGIN REJECTED, reason 0x...": the reason is checked on the
#     bytes the kernel received instead;
#   srptd: exactly one new "login rejected" log line, naming the initiator
#     port ID (32 hex digits) and the reason's Linux name.
# Then, in the same boot and against the same srptd: a login with
# req_it_iu_len = max_req_size exactly (accepted: LOGIN_RSP on the wire,
# max_it_iu_len 8276), 1 MiB written in 8 KiB immediate-data writes and read
# back; a login with ib_srp's defaults, INQUIRY; srptd stops cleanly.
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"
command -v tcpdump >/dev/null || die "tcpdump is not in the guest image"

MAX_REQ=8276              # srptd's max_req_size, set in the config below
GUID=0a1b2c3d4e5f6071     # srptd's service GUID (id_ext = ioc_guid); not a Topspin/Cisco OUI
WRONG_ID_EXT=0a1b2c3d4e5f6070
INIT_OK_EXT=00000000000000a1
INIT_BAD_EXT=00000000000000b2

siw_up || die "siw0 did not come up"
modprobe sd_mod && modprobe sg && modprobe ib_srp || die "ib_srp did not load"
ADD=/sys/class/infiniband_srp/srp-siw0-1/add_target
wait_for 50 test -e $ADD || die "$ADD missing"
g=$(gid0 siw0 | tr -d :)
IFID=${g:16:16}                     # interface-ID half of siw0's GID 0
PORT_OK=$INIT_OK_EXT$IFID           # initiator port IDs ib_srp will send
PORT_BAD=$INIT_BAD_EXT$IFID
log "siw0 GID 0 $g; initiator port IDs: ACL'd $PORT_OK, unlisted $PORT_BAD"

cat >"$RUN/srptd.toml" <<TOML
[target]
demo_mode = false
max_req_size = $MAX_REQ

[[port]]
name = "siw"
transport = "iwarp"
listen = ["$SRPTD_ADDR"]
service_guid = "$GUID"

[[lun]]
lun = 0
name = "ram0"
backstore = "ram"
size = "64MiB"
serial = "gosrp-misbehave"

[[acl]]
initiator = "0x$PORT_OK"

[[acl]]
initiator = "0002:c903:00ab:cdef"   # a port GUID of some other host
TOML
cat "$RUN/srptd.toml"
srptd_run "$RUN/srptd.toml" || die "srptd did not start"
check "srptd's login_info names the configured GUID" test "$SRPTD_ID_EXT/$SRPTD_IOC_GUID" = "$GUID/$GUID"

# ---------------------------------------------------------------- capture
CAP_PID=
# Both ends are local addresses, so the kernel carries the TCP connections
# on lo.
cap_start() { # NAME: tcpdump of srptd's port into /tmp/NAME.pcap
	rm -f "/tmp/$1.pcap" "/tmp/$1.err"
	tcpdump -i lo -nn -U -s 0 -w "/tmp/$1.pcap" "tcp port $SRPTD_PORT" 2>"/tmp/$1.err" &
	CAP_PID=$!
	wait_for 300 grep -q 'listening on' "/tmp/$1.err" || { cat "/tmp/$1.err"; return 1; }
}
cap_stop() {
	[ -n "$CAP_PID" ] || return 0
	sleep 1   # let the last segments reach the capture buffer
	kill -INT "$CAP_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do kill -0 "$CAP_PID" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$CAP_PID" 2>/dev/null
	wait "$CAP_PID" 2>/dev/null
	CAP_PID=
}
# mpa_frame NAME req|rep: the hex of the first TCP payload in the capture
# that begins with the MPA request or reply key ("MPA ID Req Frame" /
# "MPA ID Rep Frame", RFC 5044 7.1).  tcpdump -x prints each IP packet
# without its link header: skip the IP header (IPv4: IHL; IPv6: 40 bytes)
# and the TCP header (data offset).
KEY_REQ=4d504120494420526571204672616d65
KEY_REP=4d504120494420526570204672616d65
mpa_frame() {
	local key=$KEY_REQ
	[ "$2" = rep ] && key=$KEY_REP
	timeout 30 tcpdump -r "/tmp/$1.pcap" -nn -x 2>/dev/null | awk -v key="$key" '
		function nib(c) { return index("0123456789abcdef", c) - 1 }
		function flush(   ihl, doff, p) {
			if (hex == "") return
			ihl = substr(hex, 1, 1) == "6" ? 40 : nib(substr(hex, 2, 1)) * 4
			doff = nib(substr(hex, (ihl + 12) * 2 + 1, 1)) * 4
			p = substr(hex, (ihl + doff) * 2 + 1)
			if (!found && substr(p, 1, 32) == key) { print p; found = 1 }
			hex = ""
		}
		/^[ \t]+0x[0-9a-f]+:/ { for (i = 2; i <= NF; i++) hex = hex tolower($i); next }
		{ flush() }
		END { flush() }'
}
# mpa_pd HEX: the private data of an MPA frame: after the 16-byte key and
# flags, revision, PD_Length; in revision 2 with the enhanced flag (0x10,
# RFC 6581) after the 4-byte IRD/ORD word too.
mpa_pd() {
	local h=$1 flags rev len
	flags=$((16#${h:32:2})) rev=$((16#${h:34:2})) len=$((16#${h:36:4}))
	if [ "$rev" = 2 ] && ((flags & 0x10)); then
		echo "${h:48:$(((len - 4) * 2))}"
	else
		echo "${h:40:$((len * 2))}"
	fi
}

# ---------------------------------------------------------------- bad logins
add_target() { # STRING: the add_target write, bounded; prints its error text
	timeout 60 bash -c 'echo "$1" >"$2"' _ "$1" "$ADD" 2>&1
}
dmesg_mark() { DMESG_N=$(dmesg | wc -l); }
dmesg_new() { dmesg | tail -n +$((DMESG_N + 1)); }
rejected() { grep -c 'msg="login rejected"' "$RUN/srptd.log"; }

# bad_login NAME STRING REASON NAME PORT_ID TARGET_ID IT_IU_LEN
bad_login() {
	local name=$1 s=$2 reason=$3 rname=$4 iport=$5 tport=$6 itiu=$7
	local out rc req rep pd rpd n0 lines new
	log "=== $name: $s"
	n0=$(rejected)
	dmesg_mark
	cap_start "$name" || { fail "$name: tcpdump did not start"; return; }
	out=$(add_target "$s"); rc=$?
	cap_stop
	# kernel: the write fails with ECONNRESET (srp_connect_ch: ch->status)
	log "add_target: exit $rc: $out"
	check "$name: add_target write fails" test $rc != 0
	grep -q 'Connection reset by peer' <<<"$out" || fail "$name: add_target error is not ECONNRESET: $out"
	check "$name: no SRP remote port left" test -z "$(ls /sys/class/srp_remote_ports/ 2>/dev/null)"
	new=$(dmesg_new)
	echo "$new" | sed 's/^/  dmesg: /'
	grep -q 'REJ reason 0xffffff98' <<<"$new" || fail "$name: dmesg lacks ib_srp's 'REJ reason 0xffffff98'"
	grep -q "Connection 0/[0-9]* to $SIW_IP failed" <<<"$new" || fail "$name: dmesg lacks 'Connection 0/N to $SIW_IP failed'"
	! grep -qE 'BUG:|WARNING:|Oops' <<<"$new" || fail "$name: kernel warning"

	# wire: what ib_srp sent and what it got back
	req=$(mpa_frame "$name" req) rep=$(mpa_frame "$name" rep)
	log "MPA request: $req"
	log "MPA reply:   $rep"
	# MPA request: 20-byte header + 4 IRD/ORD + 56; reply: 20 + 4 + 32
	if [ ${#req} -lt 152 ] || [ ${#rep} -lt 104 ]; then
		fail "$name: MPA request or reply not captured"
	else
		pd=$(mpa_pd "$req")   # srp_login_req_rdma (56 bytes)
		check "$name: request opcode 0x00, i_port_id $iport, t_port_id $tport, req_it_iu_len $itiu" \
			test "${pd:22:2}/${pd:32:32}/${pd:64:32}/$((16#${pd:24:8}))" = "00/$iport/$tport/$itiu"
		check "$name: MPA reply has the Reject flag" test $((16#${rep:32:2} & 0x20)) = 32
		rpd=$(mpa_pd "$rep")  # SRP_LOGIN_REJ (32 bytes)
		log "SRP_LOGIN_REJ: $rpd"
		check "$name: SRP_LOGIN_REJ, 32 bytes, opcode 0xc2" test "${#rpd}/${rpd:0:2}" = "64/c2"
		check "$name: reason 0x$reason" test "${rpd:8:8}" = "$reason"
		check "$name: tag echoes the request's (${pd:0:16})" test "${rpd:16:16}" = "${pd:0:16}"
		check "$name: buf_fmt 0x0006" test "${rpd:48:4}" = 0006
	fi

	# srptd: one readable line with the initiator and the reason
	lines=$(grep 'msg="login rejected"' "$RUN/srptd.log" | tail -n +$((n0 + 1)))
	log "srptd: $lines"
	check "$name: srptd logged one rejection" test "$(rejected)" = $((n0 + 1))
	grep -q "initiator=$iport" <<<"$lines" || fail "$name: srptd's line does not name initiator $iport"
	grep -q "reason=$rname" <<<"$lines" || fail "$name: srptd's line does not give reason $rname"
	check "srptd still running" kill -0 "$SRPTD_PID"
}

s_ok() { echo "id_ext=$GUID,ioc_guid=$GUID,initiator_ext=$INIT_OK_EXT,dest=$SRPTD_ADDR$1"; }
bad_login wrong-port "id_ext=$WRONG_ID_EXT,ioc_guid=$GUID,initiator_ext=$INIT_OK_EXT,dest=$SRPTD_ADDR" \
	00010003 SRP_LOGIN_REJ_UNABLE_ASSOCIATE_CHANNEL "$PORT_OK" "$WRONG_ID_EXT$GUID" 8260
bad_login no-acl "id_ext=$GUID,ioc_guid=$GUID,initiator_ext=$INIT_BAD_EXT,dest=$SRPTD_ADDR" \
	00010006 SRP_LOGIN_REJ_CHANNEL_LIMIT_REACHED "$PORT_BAD" "$GUID$GUID" 8260
P=/sys/module/ib_srp/parameters/max_imm_data
imm0=$(cat $P)
echo 16384 >$P || die "cannot set $P"
bad_login iu-large "$(s_ok ,max_it_iu_size=$((MAX_REQ + 1)))" \
	00010002 SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE "$PORT_OK" "$GUID$GUID" $((MAX_REQ + 1))

# ---------------------------------------------------------------- good logins
log "=== good login at the limit: max_it_iu_size=$MAX_REQ"
cap_start at-limit || die "tcpdump did not start"
disk=$(srp_login siw0 "$(s_ok ,max_it_iu_size=$MAX_REQ)")
rc=$?
cap_stop
[ $rc = 0 ] || { dmesg | tail -n 20; tail -n 20 "$RUN/srptd.log"; die "login with req_it_iu_len = max_req_size failed"; }
req=$(mpa_frame at-limit req) rep=$(mpa_frame at-limit rep)
if [ ${#req} -ge 152 ] && [ ${#rep} -ge 144 ]; then
	pd=$(mpa_pd "$req") rpd=$(mpa_pd "$rep")
	check "at-limit: req_it_iu_len $MAX_REQ on the wire" test "$((16#${pd:24:8}))" = $MAX_REQ
	check "at-limit: LOGIN_RSP (0xc0) without the Reject flag" test "${rpd:0:2}/$((16#${rep:32:2} & 0x20))" = c0/0
	check "at-limit: LOGIN_RSP max_it_iu_len $MAX_REQ" test "$((16#${rpd:32:8}))" = $MAX_REQ
else
	fail "at-limit: MPA request or reply not captured (request '$req', reply '$rep')"
fi
log "disk $disk"
head -c 1M /dev/urandom >/tmp/w-8k
check "1 MiB in 8 KiB direct writes (immediate data fits: 68 + 8192 <= $MAX_REQ)" \
	timeout 120 dd if=/tmp/w-8k of="$disk" bs=8k oflag=direct status=none
check "read back equal" cmp /tmp/w-8k <(timeout 60 dd if="$disk" bs=1M count=1 iflag=direct status=none)
check "logout" srp_logout

echo "$imm0" >$P
log "=== good login with ib_srp's defaults (max_imm_data $imm0)"
disk=$(srp_login siw0 "$(s_ok)") || { dmesg | tail -n 20; tail -n 20 "$RUN/srptd.log"; die "default login failed"; }
out=$(timeout 30 sg_inq "$disk"); check "sg_inq" test $? = 0
grep -q 'Product identification' <<<"$out" || { echo "$out"; fail "sg_inq: no product identification"; }
check "data still there" cmp /tmp/w-8k <(timeout 60 dd if="$disk" bs=1M count=1 iflag=direct status=none)
check "logout" srp_logout
check "srptd stops cleanly" srptd_stop
figure refused-logins "$(grep -c 'msg="login rejected"' "$RUN/srptd.log")/3"
finish
