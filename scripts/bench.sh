#!/usr/bin/env bash
# gosrp against an NBD peer on this machine, side by side in one run:
#   gosrp:  srpctl bench -> srptd (1 GiB RAM LUN, pure-Go iWARP on 127.0.0.1,
#           default settings, demo mode, a temporary data directory)
#   peer:   fio's nbd engine -> nbdkit memory 1G (TCP on 127.0.0.1)
# Both LUNs are first filled and read back (checksummed), then every job runs
# on gosrp, then on the peer, repeated (ours, peer, ours, peer); before each
# repetition of the 1 MiB read job one loopback TCP stream (iperf3) is
# measured.
# Prints per run IOPS, MiB/s, p50/p99 latency, CPU us per I/O of the server
# and the client process and the load average; at the end the means, the
# ratios gosrp/peer, the 1 MiB read as % of the TCP stream and the duration.
#
# Usage: scripts/bench.sh [--quick] [--reps N] [--runtime 8s] [--json FILE]
#                         [--plot DIR] [--channels N] [--jobs a,b] [--lun-mib N]
#   --quick       smoke test: 1 repetition, 3 s jobs (2 s sweep points)
#   --reps N      repetitions of each job on each side (default 2)
#   --runtime D   length of each job run, e.g. 8s (default)
#   --json FILE   write all figures as JSON
#   --plot DIR    also run the sweeps (4k randread at QD 1..64, QD32 read at
#                 4k..1M; --sweep-runtime, --sweep-reps) and draw PNG charts
#   --channels N  ch_count for srpctl (default: the initiator's, min(4, CPUs))
# Other flags: test/e2e/sidebyside -h. Needs fio, nbdkit and iperf3
# (scripts/deps.sh). Every step is bounded: the builds by timeout(1), each
# job run by its runtime plus a minute, the whole run by twice its plan plus
# 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
start=$(date +%s)
json="" plot="" args=()
while (($#)); do
  case $1 in
    --json) json=${2:?--json FILE}; shift 2 ;;
    --json=*) json=${1#*=}; shift ;;
    --plot) plot=${2:?--plot DIR}; shift 2 ;;
    --plot=*) plot=${1#*=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for p in cmd/srptd cmd/srpctl test/e2e/sidebyside test/e2e/benchplot; do
  timeout 600 go build -o "$W/bin/$(basename $p)" "./$p"
done
out=${json:-$W/results.json}
sweep=()
[ -n "$plot" ] && sweep=(-sweep)
run=("$W/bin/sidebyside" -srptd "$W/bin/srptd" -srpctl "$W/bin/srpctl" -dir "$W" -json "$out" "${sweep[@]}" "${args[@]}")
bound=$("${run[@]}" -print-bound)
timeout "$((bound + 60))" "${run[@]}"
if [ -n "$json" ]; then echo "figures written to $json"; fi
if [ -n "$plot" ]; then
  timeout 120 "$W/bin/benchplot" -out "$plot" "$out"
fi
echo "scripts/bench.sh took $(($(date +%s) - start)) s (builds included)"
