#!/usr/bin/env bash
# Campaign 1, process crash: srpctl writes random data (a new file each
# cycle) to a file-backed LUN while srptd is killed with SIGKILL at a random
# moment; srptd restarts on the same data directory, and every byte srpctl
# reported acknowledged (all of them when it succeeded, else the prefix its
# error names: "N bytes acknowledged before it") is read back and compared.
# Odd cycles run the LUN with the write cache on (WCE=1), even ones with it
# off: a process crash keeps the page cache, so both must lose nothing.
#
#   scripts/campaign/crash.sh              # documented run: 100 cycles, 64 MiB each
#   CYCLES=5 SIZE_MIB=8 scripts/campaign/crash.sh   # the short CI run
#
# Prints one line per cycle and a summary: cycles, kills that interrupted a
# write, acknowledged bytes checked, acknowledged writes lost (blocks that
# read back wrong), and srptd's restart time. Exit status 1 on any loss.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
CYCLES=${CYCLES:-100}
SIZE_MIB=${SIZE_MIB:-64}
W=$(mktemp -d)
SRPTD_PID=""
cleanup() {
  [ "$BASHPID" = "$$" ] || return 0 # not in a pipeline's subshell
  set +e
  [ -n "$SRPTD_PID" ] && kill -9 "$SRPTD_PID" 2>/dev/null && wait "$SRPTD_PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "crash: FAILED: $*" >&2; tail -20 "$W/srptd.log" >&2 || true; exit 1; }

timeout 300 go build -o "$W/srptd" ./cmd/srptd
timeout 300 go build -o "$W/srpctl" ./cmd/srpctl
mkdir -p "$W/data"

config() { # $1: write_cache
  cat >"$W/srptd.toml" <<TOML
[target]
demo_mode = true
[[port]]
name = "crash"
transport = "iwarp"
listen = ["127.0.0.1:0"]
service_guid = "0002c90300c7a501"
[[lun]]
lun = 0
name = "file0"
backstore = "file"
path = "$W/lun0.img"
size = "256MiB"
write_cache = $1
TOML
}

start_srptd() {
  local t0=$EPOCHREALTIME
  "$W/srptd" -config "$W/srptd.toml" -data-dir "$W/data" >"$W/srptd.log" 2>&1 &
  SRPTD_PID=$!
  for _ in $(seq 600); do
    TARGET=$(sed -n 's/^login_info: //p' "$W/srptd.log" | head -1)
    if [ -n "$TARGET" ]; then
      RESTART_MS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
      return 0
    fi
    kill -0 "$SRPTD_PID" 2>/dev/null || fail "srptd exited"
    sleep 0.05
  done
  fail "srptd printed no login_info"
}

# Short timeouts: a write cut off by the kill fails within seconds.
R=(--reconnect-delay 200ms --fast-io-fail-tmo 2s --dev-loss-tmo 4s --quiet)
size=$((SIZE_MIB << 20))
blocks=$((256 << 11))
# Calibration: how long one write takes here, so that the kills land
# before, during and after writes in the right proportions.
config false
start_srptd
head -c "$size" /dev/urandom >"$W/in"
t0=$EPOCHREALTIME
"$W/srpctl" write "$TARGET" --if "$W/in" --qd 16 --bs 256k "${R[@]}" || fail "calibration write"
WRITE_MS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
kill "$SRPTD_PID"; wait "$SRPTD_PID" 2>/dev/null || true; SRPTD_PID=""
echo "crash: one ${SIZE_MIB} MiB write takes ${WRITE_MS} ms; kills land at random in 0..$((WRITE_MS * 5 / 4)) ms"
kills=0 interrupted=0 completed=0 checked=0 lost=0 restart_max=0 restart_sum=0
for cycle in $(seq "$CYCLES"); do
  config $([ $((cycle % 2)) = 1 ] && echo true || echo false)
  start_srptd
  head -c "$size" /dev/urandom >"$W/in"
  lba=$(( (RANDOM * 32768 + RANDOM) % (blocks - size / 512) ))
  "$W/srpctl" write "$TARGET" --if "$W/in" --lba "$lba" --qd 16 --bs 256k "${R[@]}" 2>"$W/write.err" &
  wpid=$!
  # A random moment: before login, mid-write or after the write completed.
  sleep "$(awk -v r="$RANDOM" -v d="$WRITE_MS" 'BEGIN { printf "%.3f", r / 32768 * d * 1.25 / 1000 }')"
  kill -9 "$SRPTD_PID"
  wait "$SRPTD_PID" 2>/dev/null || true
  SRPTD_PID=""
  kills=$((kills + 1))
  rc=0
  timeout 60 tail --pid="$wpid" -f /dev/null || fail "srpctl write hung after the kill"
  wait "$wpid" || rc=$?
  if [ "$rc" = 0 ]; then
    acked=$size completed=$((completed + 1)) what="completed"
  else
    msg=$(cat "$W/write.err")
    if acked=$(printf '%s\n' "$msg" | grep -oE '[0-9]+ bytes acknowledged before it' | grep -oE '^[0-9]+'); then
      interrupted=$((interrupted + 1)) what="interrupted"
    elif acked=$(printf '%s\n' "$msg" | grep -oE 'all [0-9]+ bytes were acknowledged' | grep -oE '[0-9]+'); then
      interrupted=$((interrupted + 1)) what="written, flush interrupted"
    elif printf '%s\n' "$msg" | grep -iE 'login|connect|refused|EOF' >/dev/null; then
      acked=0 what="killed before login"
    else
      fail "cycle $cycle: srpctl write failed without saying what was acknowledged: $msg"
    fi
  fi
  start_srptd
  restart_sum=$((restart_sum + RESTART_MS))
  [ "$RESTART_MS" -gt "$restart_max" ] && restart_max=$RESTART_MS
  bad=0
  if [ "$acked" -gt 0 ]; then
    "$W/srpctl" read "$TARGET" --of "$W/out" --lba "$lba" --count $((acked / 512)) "${R[@]}" 2>"$W/read.err" ||
      fail "cycle $cycle: read back: $(cat "$W/read.err")"
    # cmp -l lists differing bytes (offset from 1); count distinct blocks.
    bad=$(cmp -l <(head -c "$acked" "$W/in") "$W/out" 2>/dev/null | awk '{ print int(($1 - 1) / 512) }' | sort -u | wc -l || true)
  fi
  checked=$((checked + acked))
  lost=$((lost + bad))
  echo "crash: cycle $cycle/$CYCLES write_cache=$([ $((cycle % 2)) = 1 ] && echo on || echo off): $what, $acked bytes acknowledged at LBA $lba, $bad blocks lost; srptd back in ${RESTART_MS} ms"
  [ "$rc" = 0 ] || echo "crash:   srpctl: $(tail -1 "$W/write.err")"
  kill "$SRPTD_PID" 2>/dev/null || true; wait "$SRPTD_PID" 2>/dev/null || true; SRPTD_PID=""
done
echo "crash: summary: $CYCLES cycles, $kills kills ($interrupted interrupted a write, $completed after it completed), $checked acknowledged bytes read back, $lost acknowledged blocks lost; srptd restart mean $((restart_sum / CYCLES)) ms, max $restart_max ms"
[ "$lost" = 0 ] || exit 1
