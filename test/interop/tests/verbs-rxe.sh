#!/bin/bash
# summary: verbs unit tests on rxe0 (SRQ too); kernel ib_srp -> srptd-verbs (rxe0, 192.0.2.1:5556): login_info, sg3_utils, fio verify, ext4, re-login, fd leaks; again with use_srq; ib_srpt's port names
# timeout: 900
# srptd built with -tags verbs serves one RAM LUN on rxe0 through RDMA/CM
# (like ib_srpt's rdma_cm_port).  Its service GUID defaults to the node GUID,
# as ib_srpt's srpt_service_guid does, so the add_target string it prints as
# login_info is the one ib_srpt would need on the same HCA.
. /gosrp/suite/guest/lib.sh
command -v srptd-verbs >/dev/null || skip "srptd-verbs not built"
ulimit -l unlimited
PORT=5556
ADDR=$RXE_IP:$PORT

rxe_up || die "rxe0 did not come up"
# RDMA/CM resolves 192.0.2.1 through the IPv4-mapped GID, which the GID
# table gains shortly after the link comes up.
wait_for 100 grep -qx '0000:0000:0000:0000:0000:ffff:c000:0201' /sys/class/infiniband/rxe0/ports/1/gids/* ||
	die "rxe0 has no GID for $RXE_IP"

# go test matches -test.run level by level (split at '/'), so each group
# of conformance subtests is its own run.  Left out: the subtests that
# compare private data byte for byte (IB CM pads it, see rdma/verbs/doc.go).
verbs_test() { # NAME PATTERN
	log "=== rdma/verbs unit tests on rxe0: $2"
	(cd /tmp && GOSRP_VERBS_DEVICE=rxe0 GOSRP_VERBS_ADDR=$RXE_IP timeout 300 verbs.test -test.v -test.timeout 280s \
		-test.run "$2" >"$RUN/verbs-test-$1.log" 2>&1)
	local rc=$?
	grep -E '^ *--- |^(PASS|FAIL|ok)' "$RUN/verbs-test-$1.log"
	check "verbs.test $2 (rxe0)" test $rc = 0
	grep -q -- '--- PASS' "$RUN/verbs-test-$1.log" || fail "verbs.test $2 ran no test"
	[ $rc = 0 ] || tail -40 "$RUN/verbs-test-$1.log"
}
if command -v verbs.test >/dev/null; then
	verbs_test main '^(TestConnectSendWriteRead|TestRejectCarriesPrivateData|TestDeviceFor|TestRegionCache|TestConformance)$/^(RDMA|Queue|InvalidWR|Deregister|Close|Concurrent|GoroutineLeak)$'
	verbs_test connect '^TestConformance$/^Connect$/^(DialContext|ListenerClose)$'
	verbs_test sendrecv '^TestConformance$/^SendRecv$/^(Sizes|Gather|FIFO|Unsignaled|Bidirectional)$'
	# shared receive queues (ibv_create_srq on rxe0)
	verbs_test srq '^TestConformance$/^SRQ$'
	grep -q -- '--- SKIP: TestConformance/SRQ' "$RUN/verbs-test-srq.log" && fail "SRQ conformance skipped on rxe0"
else
	fail "verbs.test not built"
fi

# srptd-verbs: one RAM LUN, demo mode, a verbs port on rxe0.
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
size = "128MiB"
serial = "gosrp-verbs-0"
TOML
: >"$RUN/srptd.log"
srptd-verbs -config "$RUN/srptd.toml" >>"$RUN/srptd.log" 2>&1 &
SRPTD_PID=$!
wait_for 600 grep -q '^login_info: ' "$RUN/srptd.log" || { cat "$RUN/srptd.log"; die "srptd-verbs printed no login_info"; }
info=$(grep -m1 '^login_info: ' "$RUN/srptd.log" | sed 's/^login_info: //')
log "srptd-verbs pid $SRPTD_PID: login_info $info"
# ib_srpt's default service GUID is the node GUID (sysfs prints it as
# xxxx:xxxx:xxxx:xxxx); id_ext = ioc_guid = that GUID.
guid=$(tr -d : </sys/class/infiniband/rxe0/node_guid)
check "login_info is id_ext=ioc_guid=node GUID $guid, dest=$ADDR" \
	test "$info" = "id_ext=$guid,ioc_guid=$guid,dest=$ADDR"

login() { srp_login rxe0 "$(srp_string rxe0 "$1" "$1" "$ADDR")"; }
fds() { ls /proc/$SRPTD_PID/fd | wc -l; }

log "=== a target port ID other than id_ext||ioc_guid is refused"
wrong=$(printf '%016x' $((0x$guid ^ 0x1000)))
modprobe ib_srp
p=/sys/class/infiniband_srp/srp-rxe0-1/add_target
wait_for 50 test -e $p
if timeout 60 sh -c "echo '$(srp_string rxe0 "$wrong" "$wrong" "$ADDR")' >$p" 2>/dev/null; then
	fail "login with id_ext=ioc_guid=$wrong was accepted"
	srp_logout
else
	log "ok: login with id_ext=ioc_guid=$wrong refused"
fi
grep -q 'LOGIN_REJ\|reject' "$RUN/srptd.log" && log "srptd logged: $(grep -m1 -i 'reject' "$RUN/srptd.log")"

disk=$(login "$guid") || { cat "$RUN/srptd.log"; die "kernel ib_srp login to srptd-verbs failed"; }
sg=$(sg_of "$disk")
log "disk $disk ($sg)"

log "=== sg3_utils"
out=$(timeout 30 sg_inq "$disk"); check "sg_inq" test $? = 0
echo "$out"
grep -q 'Peripheral device type: disk' <<<"$out" || fail "sg_inq: not a disk"
for pg in 0x00 0x80 0x83 0xb0; do
	out=$(timeout 30 sg_vpd -p $pg "$disk" 2>&1); rc=$?
	echo "$out"
	check "sg_vpd -p $pg" test $rc = 0
done
timeout 30 sg_vpd -p 0x80 "$disk" | grep -q 'gosrp-verbs-0' || fail "VPD 0x80 lacks the serial gosrp-verbs-0"
out=$(timeout 30 sg_readcap -l "$disk"); check "sg_readcap -l" test $? = 0
echo "$out"
size=$(sed -n 's/.*Device size: \([0-9]*\) bytes.*/\1/p' <<<"$out")
check "READ CAPACITY(16): 128 MiB" test "$size" = $((128 << 20))
grep -q 'Logical block length=512 bytes' <<<"$out" || fail "READ CAPACITY(16) block length is not 512"

log "=== fio 4 KiB random write, crc32c verify (read-back)"
if fio_run rw4k --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
	--size=8M --verify=crc32c --do_verify=1 --verify_fatal=1; then
	figure randwrite-iops "$(fio_field rw4k 49)"
else
	fail "fio 4k randwrite + verify"
fi
log "=== fio 1 MiB sequential write + verify"
fio_run seq1m --filename="$disk" --direct=1 --ioengine=libaio --rw=write --bs=1M --iodepth=4 \
	--offset=64M --size=32M --verify=crc32c --do_verify=1 --verify_fatal=1 || fail "fio 1M seq write + verify"

log "=== ext4"
mkdir -p /mnt/t
check "mkfs.ext4" timeout 120 mkfs.ext4 -q -F "$disk"
check "mount" timeout 60 mount "$disk" /mnt/t
mkdir -p /tmp/src && cp -a /usr/sbin /etc /tmp/src/ 2>/dev/null
check "copy files" timeout 120 cp -a /tmp/src /mnt/t/
check "diff after copy" timeout 120 diff -r --no-dereference /tmp/src /mnt/t/src
check "umount" timeout 60 umount /mnt/t
check "fsck -fn" timeout 120 fsck.ext4 -fn "$disk"
sum1=$(timeout 120 md5sum <"$disk" | cut -d' ' -f1)

log "=== logout, login again"
check "logout" srp_logout
fd0=$(fds)
disk=$(login "$guid") || die "second login failed"
sum2=$(timeout 120 md5sum <"$disk" | cut -d' ' -f1)
check "device checksum unchanged across logout/login ($sum1)" test "$sum1" = "$sum2"
check "mount after re-login" timeout 60 mount -o ro "$disk" /mnt/t
check "diff after re-login" timeout 120 diff -r --no-dereference /tmp/src /mnt/t/src
umount /mnt/t
check "logout" srp_logout

# Every login opens RDMA/CM ids, CQs and completion channels (one per
# channel); after logout they must all be gone again.
log "=== login/logout loop: srptd's file descriptors"
for i in 1 2 3 4 5; do
	disk=$(login "$guid") || { fail "login $i of the loop"; break; }
	timeout 30 dd if="$disk" of=/dev/null bs=64k count=16 iflag=direct status=none || fail "read in loop $i"
	srp_logout || fail "logout $i of the loop"
done
# the target frees a channel's resources once its queue pair has drained
wait_for 100 eval '[ "$(fds)" -le "$fd0" ]'
fd1=$(fds)
figure srptd-fds "$fd0/$fd1"
check "no file descriptors leaked over 5 logins ($fd0 before, $fd1 after)" test "$fd1" -le "$fd0"

log "=== srptd-verbs stops cleanly"
kill -TERM $SRPTD_PID
wait_for 300 sh -c "! kill -0 $SRPTD_PID 2>/dev/null" || { kill -QUIT $SRPTD_PID; sleep 1; kill -KILL $SRPTD_PID; }
wait $SRPTD_PID; rc=$?
check "srptd-verbs exit status 0 ($rc)" test $rc = 0
grep -q '^panic:\|^fatal error:\|DATA RACE' "$RUN/srptd.log" && fail "srptd-verbs panicked"
tail -5 "$RUN/srptd.log"

# use_srq: the port's channels take their receives from one shared receive
# queue (ibv_create_srq on rxe0, srq_size 4095 as ib_srpt's default); two
# channels (ch_count=2) share it.
log "=== srptd-verbs with use_srq: two channels on one shared receive queue"
sed 's/^demo_mode = true$/demo_mode = true\nuse_srq = true/' "$RUN/srptd.toml" >"$RUN/srptd-srq.toml"
grep -qx 'use_srq = true' "$RUN/srptd-srq.toml" || die "use_srq not in $RUN/srptd-srq.toml"
: >"$RUN/srptd-srq.log"
srptd-verbs -config "$RUN/srptd-srq.toml" >>"$RUN/srptd-srq.log" 2>&1 &
SRPTD_PID=$!
wait_for 600 grep -q '^login_info: ' "$RUN/srptd-srq.log" || { cat "$RUN/srptd-srq.log"; die "srptd-verbs (use_srq) printed no login_info"; }
srq_login() { srp_login rxe0 "$(srp_string rxe0 "$guid" "$guid" "$ADDR" ch_count=2)"; }
disk=$(srq_login) || { cat "$RUN/srptd-srq.log"; die "kernel ib_srp login to srptd-verbs (use_srq) failed"; }
log "disk $disk"
if out=$(rdma resource show srq 2>&1); then
	echo "$out"
	check "srptd-verbs holds a shared receive queue on rxe0" grep -q 'comm srptd' <<<"$out"
else
	log "note: this rdma tool lists no SRQs ($out)"
fi
chans=$(grep -c 'msg="channel connected"' "$RUN/srptd-srq.log")
check "use_srq: ib_srp opened two channels ($chans)" test "$chans" -ge 2
grep 'msg="channel connected"' "$RUN/srptd-srq.log"
# two jobs on the two vCPUs (so both blk-mq queues, so both channels),
# each writing and verifying its own 8 MiB
fio_run srq-rw4k --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=32 \
	--numjobs=2 --offset_increment=8M --size=8M --cpus_allowed=0-1 --cpus_allowed_policy=split \
	--verify=crc32c --do_verify=1 --verify_fatal=1 || fail "use_srq: fio 4k randwrite + verify"
fio_run srq-seq1m --filename="$disk" --direct=1 --ioengine=libaio --rw=write --bs=1M --iodepth=4 \
	--offset=64M --size=32M --verify=crc32c --do_verify=1 --verify_fatal=1 || fail "use_srq: fio 1M seq write + verify"
sum1=$(timeout 120 md5sum <"$disk" | cut -d' ' -f1)
check "use_srq: logout" srp_logout
fd0=$(fds)
for i in 1 2 3; do
	disk=$(srq_login) || { fail "use_srq: login $i of the loop"; break; }
	[ $i = 1 ] && { sum2=$(timeout 120 md5sum <"$disk" | cut -d' ' -f1)
		check "use_srq: device checksum unchanged across logout/login ($sum1)" test "$sum1" = "$sum2"; }
	srp_logout || fail "use_srq: logout $i of the loop"
done
wait_for 100 eval '[ "$(fds)" -le "$fd0" ]'
check "use_srq: no file descriptors leaked over 3 logins ($fd0 before, $(fds) after)" test "$(fds)" -le "$fd0"
kill -TERM $SRPTD_PID
wait_for 300 sh -c "! kill -0 $SRPTD_PID 2>/dev/null" || { kill -QUIT $SRPTD_PID; sleep 1; kill -KILL $SRPTD_PID; }
wait $SRPTD_PID; rc=$?
check "srptd-verbs (use_srq) exit status 0 ($rc)" test $rc = 0
grep -q '^panic:\|^fatal error:\|DATA RACE' "$RUN/srptd-srq.log" && fail "srptd-verbs (use_srq) panicked"
grep -i 'shared receive queue' "$RUN/srptd-srq.log" | head -5

# srptd logs the names ib_srpt gives the same HCA port: LIO configfs takes a
# target directory only under a name of an ib_srpt port (srpt_lookup_port),
# so creating one under each proves them (GUID form "%04x:%04x:%04x:%04x" of
# GID 0's interface ID, and "0x" + the 32 hex digits of GID 0).
log "=== srptd's port names are ib_srpt's for rxe0"
dev_line=$(grep -m1 'msg="verbs device"' "$RUN/srptd.log")
log "srptd: $dev_line"
sp=$(sed -n 's/.* srpt_port=\([^ ]*\).*/\1/p' <<<"$dev_line")
sg=$(sed -n 's/.* srpt_port_gid=\([^ ]*\).*/\1/p' <<<"$dev_line")
ng=$(sed -n 's/.* node_guid=\([^ ]*\).*/\1/p' <<<"$dev_line")
check "srptd's node_guid $ng is rxe0's ($guid)" test "$ng" = "$guid"
check "srptd's srpt_port $sp is GID 0's interface ID ($(gid0 rxe0))" test "$sp" = "$(gid0 rxe0 | cut -d: -f5-8)"
modprobe target_core_mod && modprobe ib_srpt && mkdir -p "$CFG/srpt" || fail "modprobe ib_srpt"
for n in "$sp" "$sg"; do
	if [ -n "$n" ] && mkdir "$CFG/srpt/$n" 2>/dev/null; then
		log "ok: ib_srpt took the target name $n"
		rmdir "$CFG/srpt/$n"
	else
		fail "ib_srpt refused the target name '$n' srptd logged for rxe0"
	fi
done
if mkdir "$CFG/srpt/0000:0000:0000:0001" 2>/dev/null; then
	rmdir "$CFG/srpt/0000:0000:0000:0001"
	fail "ib_srpt took a port name it does not have: the check above proves nothing"
fi
finish
