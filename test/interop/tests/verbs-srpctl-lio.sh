#!/bin/bash
# summary: srpctl-verbs (libibverbs, rxe0) -> LIO ib_srpt (192.0.2.1:5555): login, inquiry, readcap, verified write/read, ABORT TASK, LUN RESET
# timeout: 600
# Every srpctl call is one login and one logout over RDMA/CM on soft-RoCE.
# The checks are guest/lib.sh's srpctl_lio_checks (shared with srpctl-lio):
# data written by srpctl is read back by srpctl and, independently, by the
# kernel initiator.
. /gosrp/suite/guest/lib.sh
command -v srpctl-verbs >/dev/null || skip "srpctl-verbs not built"
ulimit -l unlimited

rxe_up || die "rxe0 did not come up"
# RDMA/CM resolves 192.0.2.1 through the IPv4-mapped GID, which the GID
# table gains shortly after the link comes up.
wait_for 100 grep -qx '0000:0000:0000:0000:0000:ffff:c000:0201' /sys/class/infiniband/rxe0/ports/1/gids/* ||
	die "rxe0 has no GID for $RXE_IP"
MB=128
lio_start $MB rxe0 || die "LIO ib_srpt setup failed"
guid=$(lio_guid)
node=$(tr -d : </sys/class/infiniband/rxe0/node_guid)
check "ib_srpt's service GUID is the node GUID ($node)" test "$guid" = "$node"
# 512 KiB = ib_srp's default max_sect
srpctl_lio_checks srpctl-verbs "id_ext=$guid,ioc_guid=$guid,dest=$RXE_IP:$LIO_PORT,transport=verbs" $MB "$guid" \
	4k:100:8 64k:2048:128 512k:8192:1024
finish
