#!/bin/bash
# summary: kernel ib_srp -> srptd (pure-Go iWARP, 192.0.2.2:5556) over siw: sg3_utils, fio verify, ext4, re-login
# timeout: 900
. /gosrp/suite/guest/lib.sh
command -v srptd >/dev/null || skip "srptd not built"

siw_up || die "siw0 did not come up"
srptd_start || die "srptd did not start"
disk=$(srptd_login) || die "kernel ib_srp login to srptd failed"
sg=$(sg_of "$disk")
log "disk $disk ($sg)"

log "=== sg3_utils"
out=$(timeout 30 sg_inq "$disk"); check "sg_inq" test $? = 0
echo "$out"
grep -q 'Peripheral device type: disk' <<<"$out" || fail "sg_inq: not a disk"
# 0xb2 (Logical Block Provisioning) is mandatory only when READ CAPACITY(16)
# reports LBPME=1 (SBC-3 6.6.4); the others are SPC-4/SBC-3 mandatory or
# listed by ib_srp-era Linux targets.
lbpme=$(timeout 30 sg_readcap -l "$disk" | sed -n 's/.*lbpme=\([01]\).*/\1/p')
supported=$(timeout 30 sg_vpd -p 0x00 "$disk")
echo "$supported"
for p in 0x80 0x83 0xb0 0xb2; do
	if [ $p = 0xb2 ] && [ "$lbpme" = 0 ] && ! grep -qi '0xb2' <<<"$supported"; then
		log "VPD 0xb2 not supported and LBPME=0: allowed"
		continue
	fi
	out=$(timeout 30 sg_vpd -p $p "$disk" 2>&1); rc=$?
	echo "$out"
	check "sg_vpd -p $p" test $rc = 0
	[ $rc = 0 ] || timeout 30 sg_inq -p $p -H "$disk"   # the raw page, unchecked
done
timeout 30 sg_vpd -p 0x83 "$disk" | grep -qE 'designator type: NAA|designator type: T10 vendor' ||
	fail "VPD 0x83 has neither an NAA nor a T10 vendor ID designator"
out=$(timeout 30 sg_readcap -l "$disk"); check "sg_readcap -l" test $? = 0
echo "$out"
blk=$(sed -n 's/.*Logical block length=\([0-9]*\) bytes.*/\1/p' <<<"$out")
size=$(sed -n 's/.*Device size: \([0-9]*\) bytes.*/\1/p' <<<"$out")
[ "$size" = "$(blockdev --getsize64 "$disk")" ] || fail "READ CAPACITY(16) size $size != block device size"
[ "$blk" = "$(blockdev --getss "$disk")" ] || fail "READ CAPACITY(16) block length $blk != logical sector size"
figure lun-bytes "$size"
out=$(timeout 30 sg_luns "$disk"); check "sg_luns" test $? = 0
echo "$out"
grep -q 'LUN 0$\|^    0000000000000000' <<<"$out" || fail "REPORT LUNS lacks LUN 0"
out=$(timeout 30 sg_opcodes "$disk" 2>&1); check "sg_opcodes" test $? = 0
echo "$out" | head -40
out=$(timeout 30 sg_modes -a "$disk" 2>&1); check "sg_modes -a" test $? = 0
echo "$out" | head -40

log "=== fio 4 KiB random write, crc32c verify (read-back)"
if fio_run rw4k --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
	--size=32M --verify=crc32c --do_verify=1 --verify_fatal=1; then
	figure randwrite-iops "$(fio_field rw4k 49)"
else
	fail "fio 4k randwrite + verify"
fi
log "=== fio 1 MiB sequential write + verify, then read"
fio_run seq1m --filename="$disk" --direct=1 --ioengine=libaio --rw=write --bs=1M --iodepth=4 \
	--offset=64M --size=128M --verify=crc32c --do_verify=1 --verify_fatal=1 || fail "fio 1M seq write + verify"
if fio_run seqr --filename="$disk" --direct=1 --ioengine=libaio --rw=read --bs=1M --iodepth=4 --size=128M; then
	figure seqread-KiBps "$(fio_field seqr 7)"
else
	fail "fio 1M seq read"
fi

log "=== ext4"
mkdir -p /mnt/t
check "mkfs.ext4" timeout 120 mkfs.ext4 -q -F "$disk"
check "mount" timeout 60 mount "$disk" /mnt/t
mkdir -p /tmp/src && cp -a /usr/bin /usr/sbin /etc /tmp/src/ 2>/dev/null
check "copy files" timeout 120 cp -a /tmp/src /mnt/t/
check "diff after copy" timeout 120 diff -r --no-dereference /tmp/src /mnt/t/src
check "umount" timeout 60 umount /mnt/t
check "fsck -fn" timeout 120 fsck.ext4 -fn "$disk"
devsum() { timeout 300 dd if="$1" bs=1M iflag=direct status=none | md5sum | cut -d' ' -f1; }
sum1=$(devsum "$disk")
[ -n "$sum1" ] || fail "reading the whole device failed"

log "=== logout, login again"
check "logout" srp_logout
disk=$(srptd_login) || die "second login failed"
sum2=$(devsum "$disk")
[ -n "$sum2" ] && [ "$sum1" = "$sum2" ] && log "ok: device checksum unchanged across logout/login ($sum1)" ||
	fail "device content changed across logout/login: $sum1 -> $sum2"
check "mount after re-login" timeout 60 mount -o ro "$disk" /mnt/t
check "diff after re-login" timeout 120 diff -r --no-dereference /tmp/src /mnt/t/src
umount /mnt/t
check "final logout" srp_logout
check "srptd stops cleanly" srptd_stop
finish
