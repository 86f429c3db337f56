#!/bin/bash
# summary: kernel ib_srp -> LIO ib_srpt over siw (IPv6) and over rxe: login, sg_inq, fio 4k randread 5 s
# timeout: 420
# Proves the harness: both soft RDMA devices come up, LIO serves a 128 MiB
# rd_mcp LUN on both, and the kernel initiator logs in over each in turn.
. /gosrp/suite/guest/lib.sh

siw_up || die "siw0 did not come up"
rxe_up || die "rxe0 did not come up"
lio_start 128 siw0 rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)

for via in siw rxe; do
	if [ $via = siw ]; then
		dev=siw0 dest="[$SIW_IP6]:$LIO_PORT"
	else
		dev=rxe0 dest="$RXE_IP:$LIO_PORT"
	fi
	log "=== kernel ib_srp -> LIO over $dev ($dest)"
	disk=$(lio_login $dev "$(srp_string $dev "$guid" "$guid" "$dest")") || { fail "login over $dev"; continue; }
	log "disk $disk"
	check "sg_inq over $dev" timeout 30 sg_inq "$disk"
	inq=$(timeout 30 sg_inq "$disk")
	grep -q 'Vendor identification: LIO-ORG' <<<"$inq" || fail "vendor over $dev is not LIO-ORG"
	if fio_run rr-$via --filename="$disk" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
		--iodepth=16 --runtime=5 --time_based; then
		figure "$via-randread-iops" "$(fio_field rr-$via 8)"
	else
		fail "fio randread over $dev"
	fi
	check "logout over $dev" srp_logout
done
finish
