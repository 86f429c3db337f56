#!/usr/bin/env bash
# Two srptd gateways exporting one Ceph RBD image with ALUA (gateway A's group
# active/optimized, B's active/non-optimized), against the cluster of
# GOSRP_CEPH_CONF (scripts/test-ceph.sh starts one):
#   - both present the same LU (VPD 83h NAA), each its own relative port and
#     target port group (decoded by sg3_utils' sg_vpd when installed);
#   - srpctl target lun add --backstore rbd at run time; a missing pool is a
#     clear error at once; srpctl target alua lists the groups;
#   - a file written through A reads back the same through B;
#   - a persistent reservation taken through A conflicts through B (shared
#     through a RADOS object), and its release through A frees B;
#   - an rbd resize reaches both gateways' READ CAPACITY;
#   - a source tree copied onto ext4 through srpctl attach over A and B
#     (multipath) passes fsck and its checksums through B alone (root and
#     /dev/fuse only);
#   - srpctl bench --verify over both (multipath) while A is killed with
#     SIGKILL: the run finishes through B with 0 mismatches;
#   - A restarts and serves the image again; the data verifies through it;
#   - B set to standby through the admin API, A killed again under a verify
#     run: the initiator activates B with SET TARGET PORT GROUPS, 0
#     mismatches.
# Every step is bounded with timeout(1).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
: "${GOSRP_CEPH_CONF:?set GOSRP_CEPH_CONF to a ceph.conf (scripts/ceph-up.sh)}"
W=$(mktemp -d)
IMAGE="gw-$$-$RANDOM"
PIDS=()
cleanup() {
  set +e
  mountpoint -q "$W/fs" 2>/dev/null && { timeout 30 umount "$W/fs" || umount -l "$W/fs"; }
  [ -n "${LOOP:-}" ] && timeout 30 losetup -d "$LOOP" 2>/dev/null
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  mountpoint -q "$W/luns" 2>/dev/null && umount -l "$W/luns"
  # The images, so repeated runs do not fill a memstore cluster (a killed
  # gateway's watch may keep one for 30 s: then it stays).
  for i in "$IMAGE" "$IMAGE-added"; do timeout 20 rbd -c "$GOSRP_CEPH_CONF" rm "rbd/$i" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
step() { echo "-- ceph gateways: $*"; }
fail() {
  echo "ceph gateways FAILED: $*" >&2
  for g in a b; do [ -f "$W/$g/log" ] && { echo "--- srptd $g" >&2; tail -20 "$W/$g/log" >&2; }; done
  exit 1
}

step build
timeout 300 go build -tags ceph,pacific -o "$W/srptd" ./cmd/srptd
timeout 300 go build -o "$W/srpctl" ./cmd/srpctl
S=$W/srpctl

# gateway NAME GROUP STATE PEER PEER_STATE
gateway_conf() {
  mkdir -p "$W/$1"
  cat >"$W/$1/srptd.toml" <<TOML
[target]
demo_mode = true
[[port]]
name = "gw$1"
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "rbd"
pool = "rbd"
image = "$IMAGE"
size = "256MiB"
ceph_conf = "$GOSRP_CEPH_CONF"
[alua]
group = $2
relative_port = $2
state = "$3"
[[alua.peer]]
group = $4
state = "$5"
ports = [$4]
TOML
}
start() { # NAME -> sets T_NAME
  : >"$W/$1/log" # before the background start: the polling below reads it at once
  "$W/srptd" -config "$W/$1/srptd.toml" -data-dir "$W/$1" >"$W/$1/log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  eval "PID_$1=$pid"
  for _ in $(seq 600); do # 60 s: opening the image needs the cluster
    local t
    t=$(sed -n 's/^login_info: //p' "$W/$1/log" | head -1) || true
    if [ -n "$t" ]; then eval "T_$1=\$t"; return 0; fi
    kill -0 "$pid" 2>/dev/null || fail "srptd $1 exited"
    sleep 0.1
  done
  fail "srptd $1 printed no login_info"
}
gateway_conf a 1 active/optimized 2 active/non-optimized
gateway_conf b 2 active/non-optimized 1 active/optimized
step "start gateways A and B on rbd/$IMAGE"
start a
start b
echo "   A: $T_a"
echo "   B: $T_b"

step "same LU identity, own port and group"
for g in a b; do
  t=T_$g
  timeout 30 "$S" scsi "${!t},initiator_ext=7" "12 01 83 04 00 00" --in 1024 --binary >"$W/vpd83.$g" || fail "VPD 83h through $g"
done
# The LU designators (NAA, T10 vendor ID) are the same; the port ones differ.
naa() { od -An -tx1 -j4 -N20 "$1" | tr -d ' \n'; }
[ "$(naa "$W/vpd83.a")" = "$(naa "$W/vpd83.b")" ] || fail "A and B present different NAA designators: $(naa "$W/vpd83.a") vs $(naa "$W/vpd83.b")"
cmp -s "$W/vpd83.a" "$W/vpd83.b" && fail "A and B report the same target port designators"
if command -v sg_vpd >/dev/null; then
  for g in a b; do
    timeout 10 sg_vpd --inhex="$W/vpd83.$g" --raw --page=di >"$W/di.$g" 2>&1 || fail "sg_vpd cannot decode $g's VPD 83h: $(cat "$W/di.$g")"
  done
  grep -q 'Relative target port: 0x1$' "$W/di.a" || fail "sg_vpd: A's relative port is not 1: $(cat "$W/di.a")"
  grep -q 'Target port group: 0x2$' "$W/di.b" || fail "sg_vpd: B's target port group is not 2: $(cat "$W/di.b")"
  echo "   sg_vpd decodes A: $(grep -iE 'relative target port|target port group' "$W/di.a" | tr -s ' ' | paste -sd';')"
else
  echo "   (sg3_utils not installed: VPD 83h checked without sg_vpd)"
fi

step "admin API: an rbd LUN added at run time, a missing pool refused at once, ALUA groups listed"
ADM=(--socket "$W/a/srptd.sock")
timeout 60 "$S" target "${ADM[@]}" lun add --lun 1 --backstore rbd --pool rbd --image "$IMAGE-added" --size 16MiB --ceph-conf "$GOSRP_CEPH_CONF" || fail "lun add --backstore rbd"
timeout 30 "$S" target "${ADM[@]}" luns | grep -q "rbd/$IMAGE-added" || fail "the added rbd LUN is not listed: $(timeout 30 "$S" target "${ADM[@]}" luns)"
out=$(timeout 30 "$S" readcap "$T_a,initiator_ext=8" --lun 1 2>&1) || true
grep -q 'capacity *16777216 bytes' <<<"$out" || fail "READ CAPACITY of the added rbd LUN: $out"
t0=$SECONDS
if timeout 60 "$S" target "${ADM[@]}" lun add --lun 2 --backstore rbd --pool no-such-pool --image x --ceph-conf "$GOSRP_CEPH_CONF" >"$W/nopool.out" 2>&1; then
  fail "a LUN on a missing pool was added"
fi
grep -q 'no such pool' "$W/nopool.out" || fail "missing pool: $(cat "$W/nopool.out")"
((SECONDS - t0 < 30)) || fail "the missing pool took $((SECONDS - t0)) s to refuse"
timeout 30 "$S" target "${ADM[@]}" lun remove 1 || fail "lun remove 1"
timeout 30 "$S" target "${ADM[@]}" alua >"$W/alua.out" || fail "target alua"
grep -Eq '^1 +active/optimized +true +1 +\(this srptd\)' "$W/alua.out" && grep -Eq '^2 +active/non-optimized +false +2' "$W/alua.out" ||
  fail "target alua: $(cat "$W/alua.out")"

step "written through A, read back through B"
head -c 4M /dev/urandom >"$W/data.bin"
timeout 60 "$S" write "$T_a" --if "$W/data.bin" || fail "write through A"
timeout 60 "$S" read "$T_b" --of "$W/copy.bin" --count 8192 || fail "read through B"
cmp "$W/data.bin" "$W/copy.bin" || fail "B reads other data than A wrote"

step "a reservation taken through A conflicts through B"
# PERSISTENT RESERVE OUT parameter lists (SPC-4 table 213): RESERVATION KEY,
# SERVICE ACTION RESERVATION KEY, flags.
printf '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x0a\0\0\0\0\0\0\0\0' >"$W/pr-register.bin"
printf '\0\0\0\0\0\0\0\x0a\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' >"$W/pr-key.bin"
head -c 512 /dev/zero >"$W/block.bin"
PRA="$T_a,initiator_ext=5" PRB="$T_b,initiator_ext=6"
timeout 30 "$S" scsi "$PRA" "5f 00 00 00 00 00 00 00 18 00" --out "$W/pr-register.bin" >/dev/null || fail "REGISTER through A"
timeout 30 "$S" scsi "$PRA" "5f 01 01 00 00 00 00 00 18 00" --out "$W/pr-key.bin" >/dev/null || fail "RESERVE (write exclusive) through A"
timeout 30 "$S" scsi "$PRB" "2a 00 00 00 00 00 00 00 01 00" --out "$W/block.bin" >"$W/pr-w.out" 2>&1 && fail "B wrote under A's reservation"
grep -q 'RESERVATION CONFLICT' "$W/pr-w.out" || fail "B's write: $(cat "$W/pr-w.out")"
timeout 30 "$S" scsi "$PRB" "5e 01 00 00 00 00 00 00 20 00" --in 32 >"$W/pr-r.out" || fail "READ RESERVATION through B"
grep -q '^00000000  00 00 00 0[1-9] 00 00 00 10  00 00 00 00 00 00 00 0a' "$W/pr-r.out" || fail "B reads no reservation by key 0xa: $(cat "$W/pr-r.out")"
timeout 30 "$S" scsi "$PRA" "5f 02 01 00 00 00 00 00 18 00" --out "$W/pr-key.bin" >/dev/null || fail "RELEASE through A"
timeout 30 "$S" scsi "$PRB" "2a 00 00 00 00 00 00 00 01 00" --out "$W/block.bin" >/dev/null || fail "B cannot write after A released"

step "the image grown with rbd resize: both gateways report the new capacity"
timeout 30 rbd -c "$GOSRP_CEPH_CONF" resize "rbd/$IMAGE" --size 320M >/dev/null 2>&1 || fail "rbd resize"
for g in a b; do
  t=T_$g
  ok=""
  for _ in $(seq 20); do # srptd re-reads the capacity every 2 s
    if timeout 30 "$S" readcap "${!t},initiator_ext=8" 2>/dev/null | grep -q 'capacity *335544320 bytes'; then ok=1; break; fi
    sleep 0.5
  done
  [ -n "$ok" ] || fail "gateway $g does not report 320 MiB after the resize"
done

# A source tree on ext4 through srpctl attach (FUSE) on the RBD LUN: written
# over both gateways, checked through B. Needs root, /dev/fuse and e2fsprogs.
fs_attach() { # TARGET...
  : >"$W/attach.log"
  "$S" attach "$@" "$W/luns" --reconnect-delay 200ms >"$W/attach.log" 2>&1 &
  ATTACH=$!
  PIDS+=("$ATTACH")
  for _ in $(seq 300); do
    [ -e "$W/luns/lun0" ] && break
    kill -0 "$ATTACH" 2>/dev/null || break
    sleep 0.1
  done
  [ -e "$W/luns/lun0" ] || return 1
  LOOP=$(timeout 30 losetup -f --show "$W/luns/lun0") || fail losetup
}
fs_detach() {
  timeout 60 losetup -d "$LOOP" || fail "losetup -d"
  kill -TERM "$ATTACH"
  timeout 60 tail --pid="$ATTACH" -f /dev/null || fail "attach did not exit"
  wait "$ATTACH" || fail "attach exit status"
}
SRC=$(go env GOROOT)/src/crypto
if [ "$(id -u)" = 0 ] && [ -e /dev/fuse ] && command -v mkfs.ext4 >/dev/null && command -v losetup >/dev/null; then
  step "source tree ($SRC) on ext4: written through attach over A and B (multipath), fsck and sha256 through B alone"
  mkdir -p "$W/luns" "$W/fs"
  (cd "$SRC" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$W/sha256"
  if fs_attach "$T_a,initiator_ext=9" "$T_b,initiator_ext=9"; then
    timeout 120 mkfs.ext4 -q -F "$LOOP" || fail mkfs.ext4
    timeout 30 mount "$LOOP" "$W/fs" || fail mount
    timeout 300 cp -a "$SRC/." "$W/fs/" || fail "copy"
    timeout 120 umount "$W/fs" || fail umount
    fs_detach
    fs_attach "$T_b,initiator_ext=9" || fail "attach through B"
    timeout 120 fsck.ext4 -fn "$LOOP" >"$W/fsck.log" 2>&1 || { cat "$W/fsck.log" >&2; fail "fsck -fn through B"; }
    timeout 30 mount -o ro "$LOOP" "$W/fs" || fail "mount ro through B"
    (cd "$W/fs" && timeout 300 sha256sum -c --quiet "$W/sha256") >"$W/check.log" 2>&1 || { head "$W/check.log" >&2; fail "checksums differ through B"; }
    echo "   $(wc -l <"$W/sha256") files verified through B"
    timeout 60 umount "$W/fs" || fail umount
    fs_detach
  elif grep -Eqi "operation not permitted|permission denied" "$W/attach.log"; then
    echo "   (skipped: FUSE mounts not permitted here)"
  else
    fail "attach over A and B: $(cat "$W/attach.log")"
  fi
else
  echo "-- ceph gateways: source tree step skipped (needs root, /dev/fuse, e2fsprogs)"
fi

step "bench --verify over A and B; A killed with SIGKILL during the run"
timeout 240 "$S" bench "$T_a,initiator_ext=3" "$T_b,initiator_ext=3" --verify --rw randwrite --bs 64k --qd 16 --size 256MiB --loops 2 \
  --verify-seed 4242 -v >"$W/bench.out" 2>"$W/bench.err" &
BENCH=$!
sleep 2
kill -0 "$BENCH" 2>/dev/null || fail "the verify run ended before A was killed: $(cat "$W/bench.out" "$W/bench.err")"
kill -9 "$PID_a"
wait "$PID_a" 2>/dev/null || true
echo "   A killed"
wait "$BENCH" || fail "verify run through the failover: $(cat "$W/bench.out"; tail -20 "$W/bench.err")"
cat "$W/bench.out"
grep -q 'mismatches=0 io_errors=0' "$W/bench.out" || fail "mismatches or I/O errors"
grep -q 'switching path' "$W/bench.err" || fail "the run never left A: $(tail -5 "$W/bench.err")"

step "A restarts and rejoins: what B finished verifies through A"
start a
timeout 120 "$S" bench "$T_a,initiator_ext=4" --verify-only --rw randwrite --bs 64k --qd 8 --size 256MiB --loops 2 \
  --verify-seed 4242 >"$W/reverify.out" 2>&1 || fail "re-verify through A: $(cat "$W/reverify.out")"
grep -q 'mismatches=0 io_errors=0' "$W/reverify.out" || fail "re-verify: $(cat "$W/reverify.out")"
cat "$W/reverify.out"
step "B set to standby at run time; A killed again: the initiator activates B (SET TARGET PORT GROUPS)"
timeout 30 "$S" target --socket "$W/b/srptd.sock" alua set 2 standby || fail "alua set 2 standby"
timeout 240 "$S" bench "$T_a,initiator_ext=10" "$T_b,initiator_ext=10" --verify --rw randwrite --bs 64k --qd 16 --size 256MiB --loops 2 \
  --verify-seed 4343 -v >"$W/bench2.out" 2>"$W/bench2.err" &
BENCH=$!
sleep 2
kill -0 "$BENCH" 2>/dev/null || fail "the second verify run ended before A was killed: $(cat "$W/bench2.out" "$W/bench2.err")"
kill -9 "$PID_a"
wait "$PID_a" 2>/dev/null || true
wait "$BENCH" || fail "verify run through the activation of B: $(cat "$W/bench2.out"; tail -20 "$W/bench2.err")"
cat "$W/bench2.out"
grep -q 'mismatches=0 io_errors=0' "$W/bench2.out" || fail "mismatches or I/O errors"
grep -q 'activated a standby path' "$W/bench2.err" || fail "B was not activated: $(grep multipath "$W/bench2.err" | tail -5)"
timeout 30 "$S" target --socket "$W/b/srptd.sock" alua | grep -Eq '^2 +active/optimized' || fail "B's group is not active/optimized after the activation"
echo "-- ceph gateways: all passed"
