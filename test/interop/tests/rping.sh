#!/bin/bash
# summary: kernel rping (siw) <-> gorping (pure-Go iWARP) both ways, MPA CRC off and on, data validated (-V)
# timeout: 900
. /gosrp/suite/guest/lib.sh
command -v gorping >/dev/null || skip "gorping not built"
command -v rping >/dev/null || skip "rping (rdmacm-utils) not in the guest image"

siw_up || die "siw0 did not come up"
P=/sys/module/siw/parameters
log "siw module parameters: $(ls $P 2>/dev/null | tr '\n' ' ')"
# Stock 6.1 siw has its MPA CRC knobs as compile-time constants (off); a
# siw built with them as module parameters is driven through them too.
have_crc_params=0
[ -w $P/mpa_crc_required ] && [ -w $P/mpa_crc_strict ] && have_crc_params=1
siw_crc() { # REQUIRED STRICT (Y/N)
	[ $have_crc_params = 1 ] || return 0
	echo "$1" >$P/mpa_crc_required && echo "$2" >$P/mpa_crc_strict
}

port=7200
# rping writes its ping data to stdout and its connection events (e.g.
# "client DISCONNECT EVENT...") to stderr: they go to separate files, else a
# stderr line lands inside a buffered 64 KiB stdout line.
# listening PORT: a TCP listener on SIW_IP:PORT exists (siw's kernel socket
# or gorping's).
listening() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# expect_lines FILE PREFIX COUNT SIZE: FILE holds COUNT lines "PREFIXrdma-ping-N: ..."
# for N = 0..COUNT-1 with rping's pattern (letters from 'A'+N mod 58) up to
# SIZE-1 characters.
expect_lines() {
	awk -v f="$1" -v p="$2" -v n="$3" -v size="$4" 'BEGIN {
		while ((getline l < f) > 0) if (index(l, p "rdma-ping-") == 1) got[c++] = l
		if (c != n) { printf "%d lines, want %d\n", c, n; exit 1 }
		for (ch = 65; ch <= 122; ch++) L = L sprintf("%c", ch)
		while (length(L) < size + 120) L = L L
		for (i = 0; i < n; i++) {
			t = "rdma-ping-" i ": "
			if (got[i] != p t substr(L, 1 + i % 58, size - 1 - length(t))) { printf "line %d differs\n", i; exit 1 }
		}
	}'
}

# crc_used LOG WANT: gorping's debug log reports the negotiated CRC as WANT.
crc_used() { grep -q "crc=$2" "$1"; }

# kernel_server SIZE COUNT CRC(0/1) SIWCRC [MPAREV]: rping -s (siw) and gorping -c.
kernel_server() {
	local size=$1 count=$2 crc=$3 siwreq=$4 rev=${5:-2} want=false name spid rc src
	port=$((port + 1))
	name="kernel rping -s <- gorping -c, -S $size -C $count, gorping crc=$crc mpa-rev=$rev siw crc_required=$siwreq"
	log "=== $name"
	siw_crc "$siwreq" N
	# siw as the passive side uses the CRC iff the request asks for it.
	[ "$crc" = 1 ] && want=true
	timeout 120 rping -s -v -V -a $SIW_IP -p $port -S "$size" >"$RUN/rping-s.log" 2>"$RUN/rping-s.err" &
	spid=$!
	wait_for 100 listening $port || { fail "$name: rping -s not listening on $port"; kill $spid; wait $spid; return; }
	timeout 120 gorping -c -v -V -d -a $SIW_IP -p $port -C "$count" -S "$size" $([ "$crc" = 1 ] && echo --crc) \
		--mpa-rev "$rev" --timeout 100s >"$RUN/gorping-c.out" 2>"$RUN/gorping-c.log"
	rc=$?
	wait $spid; src=$?
	check "$name: gorping -c exit status ($rc)" test $rc = 0
	check "$name: rping -s exit status ($src)" test $src = 0
	check "$name: gorping printed the $count pings it validated" expect_lines "$RUN/gorping-c.out" "ping data: " "$count" "$size"
	check "$name: rping -s printed the $count pings it read" expect_lines "$RUN/rping-s.log" "server ping data: " "$count" "$size"
	check "$name: MPA CRC in use = $want" crc_used "$RUN/gorping-c.log" $want
	check "$name: MPA revision $rev" grep -q "rev=$rev" "$RUN/gorping-c.log"
	if [ $rc != 0 ] || [ $src != 0 ]; then
		tail -n 20 "$RUN/gorping-c.log"; tail -n 5 "$RUN/rping-s.err"; dmesg | tail -n 10
	fi
}

# kernel_client SIZE COUNT CRC(0/1) SIWCRC [MPAREV]: gorping -s and rping -c (siw).
kernel_client() {
	local size=$1 count=$2 crc=$3 siwreq=$4 rev=${5:-2} want=false name spid rc src
	port=$((port + 1))
	name="gorping -s <- kernel rping -c, -S $size -C $count, gorping crc=$crc mpa-rev=$rev siw crc_required=$siwreq"
	log "=== $name"
	siw_crc "$siwreq" N
	[ "$crc" = 1 ] || [ "$siwreq" = Y ] && want=true
	timeout 120 gorping -s -v -V -d -a $SIW_IP -p $port -C "$count" -S "$size" $([ "$crc" = 1 ] && echo --crc) \
		--mpa-rev "$rev" --timeout 100s >"$RUN/gorping-s.out" 2>"$RUN/gorping-s.log" &
	spid=$!
	wait_for 100 listening $port || { fail "$name: gorping -s not listening on $port"; kill $spid; wait $spid; return; }
	timeout 120 rping -c -v -V -a $SIW_IP -p $port -C "$count" -S "$size" >"$RUN/rping-c.log" 2>"$RUN/rping-c.err"
	rc=$?
	wait $spid; src=$?
	check "$name: rping -c exit status ($rc)" test $rc = 0
	check "$name: gorping -s exit status ($src)" test $src = 0
	check "$name: rping -c printed the $count pings it validated" expect_lines "$RUN/rping-c.log" "ping data: " "$count" "$size"
	check "$name: gorping -s validated and printed the $count pings it read" expect_lines "$RUN/gorping-s.out" "server ping data: " "$count" "$size"
	check "$name: MPA CRC in use = $want" crc_used "$RUN/gorping-s.log" $want
	check "$name: MPA revision $rev" grep -q "rev=$rev" "$RUN/gorping-s.log"
	if [ $rc != 0 ] || [ $src != 0 ]; then
		tail -n 20 "$RUN/gorping-s.log"; tail -n 5 "$RUN/rping-c.err"; dmesg | tail -n 10
	fi
}

for crc in 0 1; do
	for sc in "64 200" "65535 20"; do
		# shellcheck disable=SC2086
		set -- $sc
		kernel_server "$1" "$2" $crc N
		kernel_client "$1" "$2" $crc N
	done
done
# MPA revision 1 from gorping's side (--mpa-rev 1) is not run: stock 6.1 siw
# answers a revision 1 request with a revision 1 reply, but without the RFC
# 6581 IRD/ORD word rping -s (rdma_accept with no parameters) gets ORD 0 and
# its RDMA READ fails to post; as the initiator siw refuses a revision 1
# reply to its revision 2 request (RDMA_CM_EVENT_REJECTED, -ECONNRESET).
if [ $have_crc_params = 1 ]; then
	# siw asks for the CRC itself (C bit in its request as the active side).
	kernel_client 4096 50 0 Y
	siw_crc N N
else
	log "siw has no mpa_crc_* module parameters here: CRC driven from gorping's side only"
fi
finish
