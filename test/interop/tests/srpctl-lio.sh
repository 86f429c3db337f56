#!/bin/bash
# summary: srpctl (pure-Go iWARP) -> LIO ib_srpt over siw ([2001:db8::2]:5555): login, inquiry, readcap, verified write/read, TMFs
# timeout: 420
# The checks are guest/lib.sh's srpctl_lio_checks (shared with
# verbs-srpctl-lio): every srpctl call is one login and one logout; data
# written by srpctl is read back by srpctl and, independently, by the kernel
# initiator over rxe.  Then: no iWARP connection to LIO is left open.
. /gosrp/suite/guest/lib.sh
command -v srpctl >/dev/null || skip "srpctl not built"
srpctl login --help >/dev/null 2>&1 || skip "srpctl has no login command yet"

siw_up || die "siw0 did not come up"
rxe_up || die "rxe0 did not come up"
MB=128
lio_start $MB siw0 rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
# 512 KiB = ib_srp's default max_sect
srpctl_lio_checks srpctl "id_ext=$guid,ioc_guid=$guid,dest=[$SIW_IP6]:$LIO_PORT" $MB "$guid" \
	64k:2048:128 512k:8192:1024

log "=== logout: no iWARP connection to LIO left open"
conns() { ss -Htn state established "( sport = :$LIO_PORT or dport = :$LIO_PORT )"; }
wait_for 100 eval '[ -z "$(conns)" ]' && log "ok: no TCP connection on port $LIO_PORT" ||
	{ conns; fail "connections to LIO remain after every srpctl exited"; }
finish
