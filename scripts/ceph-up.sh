#!/usr/bin/env bash
# A single-node Ceph cluster for trying and testing the RBD backstore on one
# machine: one monitor and one OSD on 127.0.0.1, the OSD on memstore (RAM;
# nothing reaches a disk), authentication off, pools of size 1.
#
#   scripts/ceph-up.sh start DIR [POOL]   start a cluster in DIR (created), make
#                                         the pool (default "rbd") and print the
#                                         path of DIR/ceph.conf on the last line
#   scripts/ceph-up.sh stop DIR           stop the daemons and remove DIR
#
# Needs Debian's ceph-mon, ceph-osd and ceph-common (scripts/deps.sh installs
# them). Every step is bounded in time: a cluster that is not up within
# CEPH_UP_TIMEOUT seconds (default 60) is stopped and the script fails with the
# daemons' logs. Clients reach it with `-c DIR/ceph.conf` (librados, rbd, ceph)
# or `ceph_conf = "DIR/ceph.conf"` in an rbd LUN of srptd.toml.
set -euo pipefail

usage() { echo "usage: $0 start DIR [POOL] | stop DIR" >&2; exit 2; }
(($# >= 2)) || usage
cmd=$1 dir=$2 pool=${3:-rbd}
timeout=${CEPH_UP_TIMEOUT:-60}

stop() {
  local d=$1
  for pf in "$d"/run/*.pid; do
    [ -e "$pf" ] || continue
    local pid; pid=$(cat "$pf")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

case $cmd in
stop)
  [ -d "$dir" ] || exit 0
  stop "$dir"
  rm -rf "$dir"
  exit 0
  ;;
start) ;;
*) usage ;;
esac

for b in ceph-mon ceph-osd ceph rbd monmaptool; do
  command -v "$b" >/dev/null || { echo "ceph-up: $b not found (install ceph-mon ceph-osd ceph-common: scripts/deps.sh)" >&2; exit 1; }
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
mkdir -p "$dir/run" "$dir/log" "$dir/mon" "$dir/osd"
fsid=$(cat /proc/sys/kernel/random/uuid)
# A free port for the monitor: one no socket is bound to (/proc/net/tcp).
while :; do
  port=$((20000 + RANDOM % 30000))
  hex=$(printf ':%04X ' "$port")
  grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null || break
done
conf=$dir/ceph.conf
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
mon initial members = a
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = ${CEPH_MEMSTORE_BYTES:-2147483648}
osd data = $dir/osd
mon data = $dir/mon/\$name
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.\$pid.asok
log file = $dir/log/\$name.log
keyring = /dev/null
# Clients give up instead of waiting forever on a cluster that does not answer.
client mount timeout = 10
rados mon op timeout = 10
rados osd op timeout = 10
osd pool default pg autoscale mode = off
mon warn on pool no redundancy = false
mon data avail warn = 2
EOF

fail() {
  echo "ceph-up: $*" >&2
  for f in "$dir"/log/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  stop "$dir"
  exit 1
}
t() { timeout "$timeout" "$@"; }

monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null
t ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mkfs-mon.out" 2>&1 || fail "ceph-mon --mkfs failed"
t ceph-mon -c "$conf" -i a >"$dir/log/mon.out" 2>&1 || fail "ceph-mon failed to start"
uuid=$(cat /proc/sys/kernel/random/uuid)
id=$(t ceph -c "$conf" osd create "$uuid" 2>"$dir/log/osd-create.out") || fail "ceph osd create failed"
t ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >"$dir/log/mkfs-osd.out" 2>&1 || fail "ceph-osd --mkfs failed"
t ceph-osd -c "$conf" -i "$id" >"$dir/log/osd.out" 2>&1 || fail "ceph-osd failed to start"
t ceph -c "$conf" osd crush add "osd.$id" 1 root=default host=localhost >/dev/null 2>&1 || fail "ceph osd crush add failed"
deadline=$((SECONDS + timeout))
until ceph -c "$conf" osd stat 2>/dev/null | grep -q '1 up'; do
  ((SECONDS < deadline)) || fail "osd.$id not up within ${timeout}s"
  sleep 0.5
done
t ceph -c "$conf" osd pool create "$pool" 8 8 >/dev/null 2>&1 || fail "pool $pool not created"
t ceph -c "$conf" osd pool set "$pool" size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
t rbd -c "$conf" pool init "$pool" >/dev/null 2>&1 || fail "rbd pool init $pool failed"
echo "$conf"
