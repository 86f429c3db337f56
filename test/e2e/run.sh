#!/usr/bin/env bash
# End-to-end test of the programs: builds srptd and srpctl, serves a
# file-backed LUN with srptd over pure-Go iWARP on 127.0.0.1 (port chosen by
# the kernel), then drives it with srpctl: login, luns, inquiry, readcap, a
# random file written and read back, a raw CDB, task management, a 2 s
# benchmark, bench --verify (and a block corrupted in the backing file
# caught by --verify-only), FUSE attach + losetup + mkfs.ext4 + mount + fsck (root only),
# fstree.sh (the Go source tree on ext4 over a file-backed LUN, checked
# file by file after an srptd restart; root only), and finally kills srptd under I/O and checks srpctl fails with a clear
# error. Every step is bounded with timeout(1).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
W=$(mktemp -d)
SRPTD_PID=""
ATTACH_PID=""
LOOP=""
cleanup() {
  set +e
  mountpoint -q "$W/fs" 2>/dev/null && umount "$W/fs"
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
  [ -n "$ATTACH_PID" ] && kill -TERM "$ATTACH_PID" 2>/dev/null && wait "$ATTACH_PID" 2>/dev/null
  mountpoint -q "$W/luns" 2>/dev/null && umount -l "$W/luns"
  [ -n "$SRPTD_PID" ] && kill "$SRPTD_PID" 2>/dev/null && wait "$SRPTD_PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
step() { echo "-- e2e: $*"; }
fail() { echo "e2e FAILED: $*" >&2; [ -f "$W/srptd.log" ] && tail -30 "$W/srptd.log" >&2; exit 1; }

step build
timeout 300 go build -o "$W/srptd" ./cmd/srptd
timeout 300 go build -o "$W/srpctl" ./cmd/srpctl
SRPCTL="$W/srpctl"

# Everything srptd keeps (identity, admin socket) goes to a temporary data
# directory when this srptd has -data-dir, never to the current directory.
SRPTD_DATA=()
if "$W/srptd" -h 2>&1 | grep -q -- '-data-dir'; then mkdir -p "$W/srptd-data"; SRPTD_DATA=(-data-dir "$W/srptd-data"); fi
cat >"$W/srptd.toml" <<TOML
[target]
demo_mode = true
[[port]]
name = "e2e"
transport = "iwarp"
listen = ["127.0.0.1:0"]
service_guid = "0002c90300e2e001"
[[lun]]
lun = 0
name = "file0"
backstore = "file"
path = "$W/lun0.img"
size = "128MiB"
write_cache = true
[[lun]]
lun = 1
name = "ram1"
backstore = "ram"
size = "16MiB"
block_size = 4096
TOML

start_srptd() {
  "$W/srptd" -config "$W/srptd.toml" "${SRPTD_DATA[@]}" >"$W/srptd.log" 2>&1 &
  SRPTD_PID=$!
  for _ in $(seq 300); do # 30 s: a loaded 2-core machine may take seconds
    TARGET=$(sed -n 's/^login_info: //p' "$W/srptd.log" | head -1)
    [ -n "$TARGET" ] && return 0
    kill -0 "$SRPTD_PID" 2>/dev/null || fail "srptd exited"
    sleep 0.1
  done
  fail "srptd printed no login_info"
}
step "start srptd"
start_srptd
echo "   target: $TARGET"
# A short reconnect delay: a channel lost to a transient error recovers fast.
R=(--reconnect-delay 200ms)

step login
out=$(timeout 30 "$SRPCTL" login "$TARGET" "${R[@]}") || fail login
grep -q "max_it_iu_len" <<<"$out" || fail "login output: $out"
grep -q "target port ID     0002c90300e2e0010002c90300e2e001" <<<"$out" || fail "login target port ID: $out"

step "login rejected for a wrong target port ID"
DEST=${TARGET##*dest=}
out=$(timeout 30 "$SRPCTL" login "id_ext=0000000000000001,ioc_guid=0000000000000001,dest=$DEST" 2>&1) && fail "login with a wrong id_ext succeeded"
grep -q "check id_ext and ioc_guid" <<<"$out" || fail "unclear login reject: $out"
echo "   $out"

step luns
out=$(timeout 30 "$SRPCTL" luns "$TARGET" "${R[@]}") || fail luns
grep -q "^lun 0 " <<<"$out" && grep -q "^lun 1 " <<<"$out" || fail "luns: $out"

step inquiry
out=$(timeout 30 "$SRPCTL" inquiry "$TARGET" "${R[@]}") || fail inquiry
grep -q "^vendor" <<<"$out" || fail "inquiry: $out"
timeout 30 "$SRPCTL" inquiry "$TARGET" "${R[@]}" --vpd 0x83 >/dev/null || fail "inquiry VPD 83h"

step readcap
out=$(timeout 30 "$SRPCTL" readcap "$TARGET" "${R[@]}" --lun 1) || fail readcap
grep -q "block size        4096" <<<"$out" && grep -q "blocks            4096$" <<<"$out" || fail "readcap: $out"

step "write + read + cmp"
head -c $((7 * 1024 * 1024)) /dev/urandom >"$W/in"
timeout 60 "$SRPCTL" write "$TARGET" "${R[@]}" --if "$W/in" --lba 2048 --quiet || fail write
timeout 60 "$SRPCTL" read "$TARGET" "${R[@]}" --of "$W/out" --lba 2048 --count $((7 * 2048)) --quiet || fail read
cmp "$W/in" "$W/out" || fail "data read back differs"

step "scsi raw CDB"
out=$(timeout 30 "$SRPCTL" scsi "$TARGET" "${R[@]}" "25 00 00 00 00 00 00 00 00 00" --in 8) || fail "scsi READ CAPACITY(10): $out"
grep -q "SCSI Status: GOOD" <<<"$out" && grep -q "00 03 ff ff 00 00 02 00" <<<"$out" || fail "scsi output: $out"
out=$(timeout 30 "$SRPCTL" scsi "$TARGET" "${R[@]}" "ff 00 00 00 00 00" 2>&1) && fail "opcode ffh succeeded: $out"
grep -q "ILLEGAL REQUEST" <<<"$out" || fail "opcode ffh sense: $out"

step "tmf lun-reset"
out=$(timeout 30 "$SRPCTL" tmf "$TARGET" "${R[@]}" lun-reset) || fail "tmf: $out"
grep -q "function complete" <<<"$out" || fail "tmf output: $out"

step "bench 2 s"
out=$(timeout 60 "$SRPCTL" bench "$TARGET" "${R[@]}" --runtime 2s --rw randrw --bs 4k --qd 16 --channels 2 --size 64m --json) || fail "bench: $out"
grep -q '"errors": 0' <<<"$out" || fail "bench errors: $out"
grep -Eq '"ios": [1-9]' <<<"$out" || fail "bench did no I/O: $out"

step "bench --verify; a block corrupted in the backing file is caught"
V=(--lun 0 --bs 64k --size 8m --qd 8 --rw randwrite --verify-seed 99 --loops 2)
timeout 120 "$SRPCTL" bench "$TARGET" "${R[@]}" "${V[@]}" --verify >/dev/null || fail "bench --verify"
timeout 120 "$SRPCTL" bench "$TARGET" "${R[@]}" "${V[@]}" --verify-only >/dev/null || fail "bench --verify-only of an intact region"
# 4 bytes into the payload of LBA 4096 (512-byte blocks), behind srptd's back.
printf 'XXXX' | dd of="$W/lun0.img" bs=1 seek=$((4096 * 512 + 100)) conv=notrunc,fsync status=none
out=$(timeout 120 "$SRPCTL" bench "$TARGET" "${R[@]}" "${V[@]}" --verify-only 2>&1) && fail "--verify-only missed a corrupted block: $out"
grep -q "lba 4096: corrupt" <<<"$out" && grep -q "1 of 16384 blocks mismatched" <<<"$out" || fail "--verify-only: $out"

if [ "$(id -u)" = 0 ] && [ -e /dev/fuse ] && command -v mkfs.ext4 >/dev/null && command -v losetup >/dev/null; then
  step "attach via FUSE + losetup + mkfs.ext4 + mount"
  mkdir -p "$W/luns" "$W/fs"
  "$SRPCTL" attach "$TARGET" "$W/luns" >"$W/attach.log" 2>&1 &
  ATTACH_PID=$!
  for _ in $(seq 200); do [ -e "$W/luns/lun0" ] && break; kill -0 "$ATTACH_PID" 2>/dev/null || break; sleep 0.1; done
  if ! [ -e "$W/luns/lun0" ] && grep -Eqi "operation not permitted|permission denied" "$W/attach.log"; then
    step "attach skipped: FUSE mounts not permitted here"; ATTACH_PID=""
  else
  [ -e "$W/luns/lun0" ] || { cat "$W/attach.log" >&2; fail "attach: no lun0"; }
  LOOP=$(timeout 30 losetup -f --show "$W/luns/lun0") || fail losetup
  timeout 120 mkfs.ext4 -q -F "$LOOP" || fail mkfs.ext4
  timeout 30 mount "$LOOP" "$W/fs" || fail mount
  timeout 60 cp -r "$W/in" cmd srp "$W/fs/" || fail "copy files"
  timeout 60 sync
  timeout 30 umount "$W/fs" || fail umount
  timeout 30 losetup -d "$LOOP" || fail "losetup -d"
  LOOP=$(timeout 30 losetup -f --show "$W/luns/lun0") || fail losetup
  timeout 120 fsck.ext4 -fn "$LOOP" || fail "fsck -fn"
  timeout 30 mount -o ro "$LOOP" "$W/fs" || fail "mount ro"
  cmp "$W/in" "$W/fs/in" || fail "file copied through the filesystem differs"
  timeout 30 umount "$W/fs" || fail umount
  timeout 30 losetup -d "$LOOP" || fail "losetup -d"
  LOOP=""
  kill -TERM "$ATTACH_PID"
  timeout 30 tail --pid="$ATTACH_PID" -f /dev/null || fail "attach did not exit on SIGTERM"
  wait "$ATTACH_PID" || { cat "$W/attach.log" >&2; fail "attach exit status"; }
  ATTACH_PID=""
  grep -q detached "$W/attach.log" || fail "attach: no detach message"
  mountpoint -q "$W/luns" && fail "still mounted after detach"
  fi
else
  step "attach skipped (needs root, /dev/fuse, losetup, mkfs.ext4)"
fi

step "source tree on ext4 across an srptd restart (fstree.sh)"
SRPTD="$W/srptd" SRPCTL="$SRPCTL" timeout 900 test/e2e/fstree.sh || fail "fstree.sh"

step "kill srptd under I/O"
# Kill only once the bench is logged in (a new "channel connected" in the
# log): killed before its login, the bench fails with a refused connection
# instead of the lost-target error checked below.
connected() { grep -c 'channel connected' "$W/srptd.log" || true; }
n0=$(connected)
timeout 60 "$SRPCTL" bench "$TARGET" --runtime 20s --rw randread --qd 8 --size 16m \
  --reconnect-delay 200ms --fast-io-fail-tmo 1s --dev-loss-tmo 3s >"$W/kill.out" 2>&1 &
BENCH=$!
for _ in $(seq 300); do
  [ "$(connected)" -gt "$n0" ] && break
  kill -0 "$BENCH" 2>/dev/null || { cat "$W/kill.out" >&2; fail "bench ended before srptd was killed"; }
  sleep 0.1
done
[ "$(connected)" -gt "$n0" ] || fail "the bench never logged in"
sleep 0.5 # I/O in flight
kill -9 "$SRPTD_PID"
wait "$SRPTD_PID" 2>/dev/null || true
SRPTD_PID=""
rc=0
wait "$BENCH" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$W/kill.out" >&2; fail "bench did not fail cleanly after srptd died (rc $rc)"; }
grep -Eq "unreachable|lost|channel lost" "$W/kill.out" || { cat "$W/kill.out" >&2; fail "no clear error after srptd died"; }
out=$(timeout 30 "$SRPCTL" login "$TARGET" 2>&1) && fail "login to a dead target succeeded"
grep -Eq "refused|connect" <<<"$out" || fail "login to a dead target: unclear error: $out"
echo "   $out"

echo "== e2e passed"
