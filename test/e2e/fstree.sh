#!/usr/bin/env bash
# A real source tree through the whole stack, across a target restart:
#   srptd serves a file-backed LUN over pure-Go iWARP on 127.0.0.1 (kernel-
#   chosen port, explicit config: nothing taken from srptd's defaults);
#   srpctl attach (FUSE) -> losetup -> mkfs.ext4 -> mount -> copy the Go
#   distribution's src/ (about 11k files, 160 MB) -> umount -> fsck -fn ->
#   detach; srptd is stopped with SIGTERM and started again on the same
#   backing file; attach -> losetup -> fsck -fn -> mount read-only ->
#   sha256sum -c of every file, and the file lists must match; last, the
#   backing file itself fscks clean. A second file-backed LUN gets
#   `srpctl bench --verify` blocks before the restart and --verify-only
#   after it.
# Needs root, /dev/fuse, losetup, mkfs.ext4, fsck.ext4; skips otherwise.
# Every step is bounded with timeout(1); mounts, loop devices, the FUSE
# attach and srptd are cleaned up on any exit.
# Usage: test/e2e/fstree.sh [SRC_DIR]   (default: $(go env GOROOT)/src)
# SRPTD / SRPCTL name prebuilt binaries (run.sh passes its own).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
SRC=${1:-$(go env GOROOT)/src}
SRC=${SRC%/}

if [ "$(id -u)" != 0 ] || ! [ -e /dev/fuse ]; then
  echo "-- fstree: skipped (needs root and /dev/fuse)"; exit 0
fi
for tool in losetup mkfs.ext4 fsck.ext4 mount umount mountpoint sha256sum; do
  command -v "$tool" >/dev/null || { echo "-- fstree: skipped ($tool not installed)"; exit 0; }
done

W=$(mktemp -d)
SRPTD_PID=""
ATTACH_PID=""
LOOP=""
T0=$(date +%s.%N)
cleanup() {
  set +e
  # Bounded: a hung FUSE server must not hang the cleanup (the lazy unmount
  # and killing srpctl attach end its requests with errors).
  mountpoint -q "$W/fs" 2>/dev/null && { timeout 30 umount "$W/fs" || umount -l "$W/fs"; }
  [ -n "$LOOP" ] && timeout 30 losetup -d "$LOOP" 2>/dev/null
  if [ -n "$ATTACH_PID" ]; then
    kill -TERM "$ATTACH_PID" 2>/dev/null
    timeout 20 tail --pid="$ATTACH_PID" -f /dev/null || kill -KILL "$ATTACH_PID" 2>/dev/null
    wait "$ATTACH_PID" 2>/dev/null
  fi
  mountpoint -q "$W/luns" 2>/dev/null && umount -l "$W/luns"
  if [ -n "$SRPTD_PID" ]; then
    kill -TERM "$SRPTD_PID" 2>/dev/null
    timeout 20 tail --pid="$SRPTD_PID" -f /dev/null || kill -KILL "$SRPTD_PID" 2>/dev/null
    wait "$SRPTD_PID" 2>/dev/null
  fi
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { echo "-- fstree [$(elapsed)s]: $*"; }
fail() {
  echo "fstree FAILED: $*" >&2
  for f in srptd.log attach.log; do
    [ -f "$W/$f" ] && { echo "--- $f:" >&2; tail -20 "$W/$f" >&2; }
  done
  exit 1
}

if [ -z "${SRPTD:-}" ] || [ -z "${SRPCTL:-}" ]; then
  step build
  timeout 300 go build -o "$W/srptd" ./cmd/srptd || fail "build srptd"
  timeout 300 go build -o "$W/srpctl" ./cmd/srpctl || fail "build srpctl"
  SRPTD=$W/srptd SRPCTL=$W/srpctl
fi
mkdir -p "$W/data" "$W/luns" "$W/fs"

# The source's manifest first: sha256 of every regular file, and the list of
# every path with its type (a missing directory, symlink or empty file shows).
step "manifest of $SRC"
(cd "$SRC" && find . -type f -print0 | sort -z | timeout 120 xargs -0 sha256sum) >"$W/sha256" || fail "sha256 of $SRC"
(cd "$SRC" && find . -printf '%y %p\n' | sort) >"$W/list.src"
NFILES=$(wc -l <"$W/sha256")
KB=$(du -sk "$SRC" | cut -f1)
echo "   $NFILES files, $((KB / 1024)) MiB"
# Room for the tree twice over (ext4 metadata, small files' blocks).
SIZE_MIB=$(((KB * 2 / 1024 + 255) / 256 * 256))

# Everything srptd keeps (identity, admin socket) goes to a temporary data
# directory when this srptd has -data-dir, never to the current directory.
SRPTD_DATA=()
if "$SRPTD" -h 2>&1 | grep -q -- '-data-dir'; then mkdir -p "$W/srptd-data"; SRPTD_DATA=(-data-dir "$W/srptd-data"); fi
cat >"$W/srptd.toml" <<TOML
[target]
demo_mode = true
[[port]]
name = "fstree"
transport = "iwarp"
listen = ["127.0.0.1:0"]
service_guid = "0002c90300f5e001"
[[lun]]
lun = 0
name = "tree"
backstore = "file"
path = "$W/data/lun0.img"
size = "${SIZE_MIB}MiB"
write_cache = true
[[lun]]
lun = 1
name = "verify"
backstore = "file"
path = "$W/data/lun1.img"
size = "32MiB"
block_size = 4096
write_cache = true
TOML

start_srptd() {
  : >"$W/srptd.log"
  "$SRPTD" -config "$W/srptd.toml" "${SRPTD_DATA[@]}" >>"$W/srptd.log" 2>&1 &
  SRPTD_PID=$!
  TARGET=""
  for _ in $(seq 300); do
    TARGET=$(sed -n 's/^login_info: //p' "$W/srptd.log" | head -1)
    [ -n "$TARGET" ] && return 0
    kill -0 "$SRPTD_PID" 2>/dev/null || fail "srptd exited"
    sleep 0.1
  done
  fail "srptd printed no login_info in 30 s"
}

stop_srptd() {
  kill -TERM "$SRPTD_PID"
  timeout 60 tail --pid="$SRPTD_PID" -f /dev/null || fail "srptd did not exit within 60 s of SIGTERM"
  wait "$SRPTD_PID" || fail "srptd exit status after SIGTERM"
  SRPTD_PID=""
}

attach() {
  "$SRPCTL" attach "$TARGET" "$W/luns" --reconnect-delay 200ms >"$W/attach.log" 2>&1 &
  ATTACH_PID=$!
  for _ in $(seq 300); do
    [ -e "$W/luns/lun0" ] && break
    kill -0 "$ATTACH_PID" 2>/dev/null || break
    sleep 0.1
  done
  if ! [ -e "$W/luns/lun0" ]; then
    if grep -Eqi "operation not permitted|permission denied" "$W/attach.log"; then
      ATTACH_PID=""
      echo "-- fstree: skipped (FUSE mounts not permitted here)"; exit 0
    fi
    fail "attach: no lun0 within 30 s"
  fi
  LOOP=$(timeout 30 losetup -f --show "$W/luns/lun0") || fail losetup
}

detach() {
  timeout 60 losetup -d "$LOOP" || fail "losetup -d"
  LOOP=""
  kill -TERM "$ATTACH_PID"
  timeout 60 tail --pid="$ATTACH_PID" -f /dev/null || fail "attach did not exit within 60 s of SIGTERM"
  wait "$ATTACH_PID" || fail "attach exit status"
  ATTACH_PID=""
  grep -q "^detached" "$W/attach.log" || fail "attach: no detach message"
  ! mountpoint -q "$W/luns" || fail "still mounted after detach"
}

step "start srptd (file-backed LUN, ${SIZE_MIB} MiB)"
start_srptd
echo "   target: $TARGET"
step "attach + losetup + mkfs.ext4 + mount"
attach
timeout 120 mkfs.ext4 -q -F "$LOOP" || fail mkfs.ext4
timeout 30 mount "$LOOP" "$W/fs" || fail mount
step "copy $NFILES files"
t=$(date +%s)
mkdir "$W/fs/tree"
timeout 600 cp -a "$SRC/." "$W/fs/tree/" || fail "copy (600 s bound)"
timeout 300 sync || fail "sync (300 s bound)"
echo "   copied and synced in $(($(date +%s) - t)) s"
step "umount + fsck -fn + detach"
timeout 120 umount "$W/fs" || fail umount
timeout 300 fsck.ext4 -fn "$LOOP" >"$W/fsck1.log" 2>&1 || { cat "$W/fsck1.log" >&2; fail "fsck -fn after the copy"; }
detach
# LUN 1: CRC32C-verified blocks written now, checked after the restart.
VERIFY=(--lun 1 --bs 64k --qd 16 --rw randwrite --verify-seed 4242 --loops 2 --reconnect-delay 200ms)
step "bench --verify on lun 1 (2 passes over 32 MiB)"
timeout 300 "$SRPCTL" bench "$TARGET" "${VERIFY[@]}" --verify || fail "bench --verify"

step "stop srptd (SIGTERM) and start it again on the same backing file"
stop_srptd
start_srptd
echo "   target: $TARGET"
step "attach + fsck -fn + mount read-only"
attach
timeout 300 fsck.ext4 -fn "$LOOP" >"$W/fsck2.log" 2>&1 || { cat "$W/fsck2.log" >&2; fail "fsck -fn after the restart"; }
timeout 30 mount -o ro "$LOOP" "$W/fs" || fail "mount ro"
step "sha256sum -c of $NFILES files"
(cd "$W/fs/tree" && timeout 600 sha256sum -c --quiet "$W/sha256") >"$W/check.log" 2>&1 || {
  head -20 "$W/check.log" >&2; fail "checksums differ after the restart"; }
(cd "$W/fs/tree" && find . -printf '%y %p\n' | sort) >"$W/list.dst"
diff "$W/list.src" "$W/list.dst" >"$W/list.diff" || { head -20 "$W/list.diff" >&2; fail "file lists differ"; }
timeout 120 umount "$W/fs" || fail umount
detach
step "bench --verify-only on lun 1 after the restart"
timeout 300 "$SRPCTL" bench "$TARGET" "${VERIFY[@]}" --verify-only || fail "bench --verify-only after the restart"
stop_srptd
# The backing file itself, with no SRP in the way, is the same clean ext4.
step "fsck -fn of the backing file"
timeout 300 fsck.ext4 -fn "$W/data/lun0.img" >"$W/fsck3.log" 2>&1 || { cat "$W/fsck3.log" >&2; fail "fsck -fn of the backing file"; }
echo "== fstree passed: $NFILES files, $((KB / 1024)) MiB, in $(elapsed) s"
