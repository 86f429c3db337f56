#!/usr/bin/env bash
# Campaign 3, network faults. Two parts:
#
# 1. Stream faults through internal/faultproxy (no privileges): delay 50 ms
#    ± 20 ms, an initiator that stops reading (zero window) for 60 s, a TCP
#    reset in mid-I/O, the link down for 5, 30 and 120 s, with verified
#    writes (test/reliability TestNetFaults with RELIABILITY_LONG=1).
# 2. Packet faults (root, nftables): srptd in its own network namespace
#    behind a veth pair; srpctl bench --verify across 1 % packet loss in
#    both directions (nft "numgen random mod 100 < 1 drop"), and srpctl
#    write across a partition (every packet dropped) of PARTITION seconds,
#    then the acknowledged bytes read back and compared. tc netem is not
#    needed (nor present on every kernel): nftables drops, the proxy delays.
#
#   scripts/campaign/netfault.sh                  # documented run: both parts, long holds
#   SHORT=1 scripts/campaign/netfault.sh          # 2 s holds, 10 s partition
#   PARTS=2 SHORT=1 scripts/campaign/netfault.sh  # part 2 only (the test suite's run:
#                                                 # go test runs part 1's short version)
#
# Prints per fault: runs, verified bytes, errors, time to recover.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
SHORT=${SHORT:-0}
PARTITION=${PARTITION:-30}
[ "$SHORT" = 1 ] && PARTITION=10

PARTS=${PARTS:-1 2}
if [[ " $PARTS " != *" 1 "* ]]; then
  :
elif [ "$SHORT" = 1 ]; then
  echo "== netfault part 1: stream faults through the proxy"
  go test -count=1 -timeout 10m ./test/reliability -run TestNetFaults -v | grep -E 'netfault_test|^(---|ok|FAIL)'
else
  echo "== netfault part 1: stream faults through the proxy"
  RELIABILITY_LONG=1 go test -count=1 -timeout 60m ./test/reliability -run TestNetFaults -v | grep -E 'netfault_test|^(---|ok|FAIL)'
fi

if [[ " $PARTS " != *" 2 "* ]]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v nft >/dev/null; then
  echo "== netfault part 2 skipped: needs root and nftables (apt-get install nftables)"
  exit 0
fi
echo "== netfault part 2: packet loss and partition (netns + veth + nftables)"
NS=gosrp-nf$$
W=$(mktemp -d)
SRPTD_PID=""
cleanup() {
  [ "$BASHPID" = "$$" ] || return 0
  set +e
  [ -n "$SRPTD_PID" ] && kill "$SRPTD_PID" 2>/dev/null && wait "$SRPTD_PID" 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  ip link del "veth$$h" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "netfault: FAILED: $*" >&2; tail -20 "$W/srptd.log" >&2 || true; exit 1; }
# A container may be root without the right to make namespaces, or
# without nf_tables: say so and stop, rather than fail the suite.
if ! ip netns add "$NS" 2>"$W/ns.err" || ! ip netns exec "$NS" nft list tables >/dev/null 2>>"$W/ns.err"; then
  echo "== netfault part 2 skipped: no network namespace with nftables here: $(head -1 "$W/ns.err")"
  exit 0
fi
go build -o "$W/srptd" ./cmd/srptd
go build -o "$W/srpctl" ./cmd/srpctl
ip link add "veth$$h" type veth peer name "veth$$t"
ip link set "veth$$t" netns "$NS"
ip addr add 10.231.$(($$ % 250)).1/24 dev "veth$$h"
ip link set "veth$$h" up
HOST=10.231.$(($$ % 250)).1 TGT=10.231.$(($$ % 250)).2
ip -n "$NS" addr add "$TGT/24" dev "veth$$t"
ip -n "$NS" link set "veth$$t" up
ip -n "$NS" link set lo up
cat >"$W/srptd.toml" <<TOML
[target]
demo_mode = true
[[port]]
name = "nf"
transport = "iwarp"
listen = ["$TGT:5555"]
service_guid = "0002c90300fa0101"
[[lun]]
lun = 0
name = "file0"
backstore = "file"
path = "$W/lun0.img"
size = "256MiB"
TOML
ip netns exec "$NS" "$W/srptd" -config "$W/srptd.toml" -data-dir "$W/data" >"$W/srptd.log" 2>&1 &
SRPTD_PID=$!
for _ in $(seq 300); do
  T=$(sed -n 's/^login_info: //p' "$W/srptd.log" | head -1)
  [ -n "$T" ] && break
  sleep 0.1
done
[ -n "$T" ] || fail "srptd printed no login_info"
nft_ns() { ip netns exec "$NS" nft "$@"; }
nft_ns add table inet gosrpnf
nft_ns add chain inet gosrpnf in '{ type filter hook input priority 0; }'
nft_ns add chain inet gosrpnf out '{ type filter hook output priority 0; }'

# 1 % loss each way: TCP retransmits; the data must verify.
nft_ns add rule inet gosrpnf in numgen random mod 100 '<' 1 counter drop
nft_ns add rule inet gosrpnf out numgen random mod 100 '<' 1 counter drop
size=128m; [ "$SHORT" = 1 ] && size=32m
t0=$SECONDS
if "$W/srpctl" bench "$T" --verify --size "$size" --bs 64k --qd 16 --loops 2 --reconnect-delay 500ms >"$W/loss.out" 2>&1; then
  dropped=$(nft_ns list table inet gosrpnf | grep -oE 'packets [0-9]+' | awk '{ s += $2 } END { print s + 0 }')
  echo "netfault: 1% loss both ways: bench --verify of $size x 2 passes passed in $((SECONDS - t0)) s, $dropped packets dropped: $(grep -iE 'verif|block' "$W/loss.out" | tail -1)"
else
  cat "$W/loss.out"; fail "bench --verify across 1% loss"
fi
nft_ns flush chain inet gosrpnf in
nft_ns flush chain inet gosrpnf out

# Partition: every packet dropped for PARTITION s in the middle of a write.
head -c $((64 << 20)) /dev/urandom >"$W/in"
R=(--reconnect-delay 1s --quiet)
# Small commands, one at a time: the write lasts seconds, the partition
# lands in its middle.
"$W/srpctl" write "$T" --if "$W/in" --bs 4k --qd 1 "${R[@]}" 2>"$W/write.err" &
wpid=$!
sleep 1
nft_ns add rule inet gosrpnf in drop
nft_ns add rule inet gosrpnf out drop
kill -0 "$wpid" 2>/dev/null || fail "the write ended before the partition; make it longer"
sleep "$PARTITION"
nft_ns flush chain inet gosrpnf in
nft_ns flush chain inet gosrpnf out
healed=$SECONDS
rc=0; wait "$wpid" || rc=$?
done_after=$((SECONDS - healed))
if [ "$rc" = 0 ]; then
  acked=$((64 << 20)) what="completed after the partition"
else
  acked=$(grep -oE '[0-9]+ bytes acknowledged before it' "$W/write.err" | grep -oE '^[0-9]+' || true)
  [ -n "$acked" ] || acked=$(grep -oE 'all [0-9]+ bytes were acknowledged' "$W/write.err" | grep -oE '[0-9]+' || true)
  [ -n "$acked" ] || fail "srpctl write failed without saying what was acknowledged: $(cat "$W/write.err")"
  what="failed: $(tail -1 "$W/write.err" | cut -c1-200)"
fi
bad=0
if [ "$acked" -gt 0 ]; then
  "$W/srpctl" read "$T" --of "$W/out" --count $((acked / 512)) "${R[@]}" || fail "read back after the partition"
  bad=$(cmp -l <(head -c "$acked" "$W/in") "$W/out" 2>/dev/null | awk '{ print int(($1 - 1) / 512) }' | sort -u | wc -l || true)
fi
echo "netfault: partition ${PARTITION} s mid-write: $what; $acked bytes acknowledged, $bad blocks of them wrong; srpctl ended ${done_after} s after the partition healed"
[ "$bad" = 0 ] || exit 1
