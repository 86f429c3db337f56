#!/usr/bin/env bash
# srpctl bench against srptd, side by side with the NBD peer baseline
# (nbdkit memory plugin + fio, /work/shared/bench/bench-peers.sh or
# test/e2e/bench-peers.sh) on this machine, same jobs: 1 GiB RAM LUN,
# iodepth 32, randread/randwrite 4 KiB, read/write 1 MiB.
# Usage: test/e2e/bench.sh [RUNTIME_S]   prints the machine, one line per
# job and the ratios. SRPTD / SRPCTL name prebuilt binaries.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
RT=${1:-10}
W=$(mktemp -d)
SRPTD_PID=""
trap '[ -n "$SRPTD_PID" ] && kill $SRPTD_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
if [ -z "${SRPTD:-}" ] || [ -z "${SRPCTL:-}" ]; then
  timeout 300 go build -o "$W/srptd" ./cmd/srptd
  timeout 300 go build -o "$W/srpctl" ./cmd/srpctl
  SRPTD=$W/srptd SRPCTL=$W/srpctl
fi
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(go version | cut -d' ' -f3), kernel $(uname -r)"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# Everything srptd keeps (identity, admin socket) goes to a temporary data
# directory when this srptd has -data-dir, never to the current directory.
SRPTD_DATA=()
if "$SRPTD" -h 2>&1 | grep -q -- '-data-dir'; then mkdir -p "$W/srptd-data"; SRPTD_DATA=(-data-dir "$W/srptd-data"); fi
cat >"$W/srptd.toml" <<TOML
[target]
demo_mode = true
[[port]]
name = "bench"
transport = "iwarp"
listen = ["127.0.0.1:0"]
service_guid = "0002c90300be0001"
[[lun]]
lun = 0
name = "ram0"
backstore = "ram"
size = "1GiB"
TOML
"$SRPTD" -config "$W/srptd.toml" "${SRPTD_DATA[@]}" >"$W/srptd.log" 2>&1 &
SRPTD_PID=$!
for _ in $(seq 100); do
  TARGET=$(sed -n 's/^login_info: //p' "$W/srptd.log" | head -1)
  [ -n "$TARGET" ] && break
  sleep 0.1
done
[ -n "$TARGET" ] || { cat "$W/srptd.log"; exit 1; }
# 1 MiB commands need max_sect 2048 (ib_srp's default is 1024 sectors); one
# channel, as the peer uses one NBD connection (the default is min(4, CPUs)).
TARGET="$TARGET,max_sect=2048,ch_count=1"
# Fill the LUN so reads are not of unwritten data, as the peer script does:
# one CRC32C-verified pass of 1 MiB writes over the whole GiB, read back.
timeout 300 "$SRPCTL" bench "$TARGET" --rw write --bs 1m --qd 8 --verify >/dev/null

declare -A ours
for job in "randread 4k randread-4k" "randwrite 4k randwrite-4k" "read 1m seqread-1m" "write 1m seqwrite-1m"; do
  set -- $job
  j=$(timeout $((RT + 60)) "$SRPCTL" bench "$TARGET" --rw "$1" --bs "$2" --qd 32 --runtime "${RT}s" --json)
  iops=$(sed -n 's/.*"iops": \([0-9.]*\).*/\1/p' <<<"$j")
  mib=$(sed -n 's/.*"mib_per_s": \([0-9.]*\).*/\1/p' <<<"$j")
  p50=$(sed -n 's/.*"lat_p50_us": \([0-9.]*\).*/\1/p' <<<"$j")
  p99=$(sed -n 's/.*"lat_p99_us": \([0-9.]*\).*/\1/p' <<<"$j")
  p999=$(sed -n 's/.*"lat_p99_9_us": \([0-9.]*\).*/\1/p' <<<"$j")
  printf "srpctl %-14s %8.0f IOPS %9.1f MiB/s  lat p50 %8.1f us p99 %8.1f us p99.9 %8.1f us\n" "$3" "$iops" "$mib" "$p50" "$p99" "$p999"
  ours[$3]=$iops
done
kill $SRPTD_PID; wait $SRPTD_PID 2>/dev/null || true; SRPTD_PID=""
echo "load average between the two sides: $(cut -d' ' -f1-3 /proc/loadavg)"

peers=/work/shared/bench/bench-peers.sh
if command -v nbdkit >/dev/null && command -v fio >/dev/null && [ -x "$peers" ]; then
  timeout $((RT * 8 + 120)) "$peers" "$RT" | tee "$W/peers.txt"
  echo "ratios (srpctl/srptd over nbdkit/fio, IOPS):"
  while read -r _ name dir iops _; do
    [ -n "${ours[$name]:-}" ] || continue
    awk -v n="$name" -v a="${ours[$name]}" -v b="$iops" 'BEGIN { if (b > 0) printf "  %-14s %.2f\n", n, a / b }'
  done <"$W/peers.txt"
else
  echo "peer baseline skipped (needs nbdkit, fio and $peers)"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
