#!/usr/bin/env bash
# Kernel interop suite: boots Debian's kernel under qemu, one VM per test,
# with soft-iWARP (siw) and soft-RoCE (rxe), LIO ib_srpt and the kernel
# ib_srp initiator, and runs test/interop/tests/NAME.sh inside the guest next
# to srptd/srpctl built here on the host.  See docs/INTEROP.md.
#
# usage: test/interop/run.sh [-v] [TEST...]     (default: the enabled tests)
#        test/interop/run.sh --list
#   -v  stream each test's output while it runs
#
# Exit status: 0 when every test passed or was skipped, 1 otherwise.
#
# Environment:
#   GOSRP_INTEROP_CACHE    cache directory (default ~/.cache/gosrp-interop);
#                          logs go to its logs/ subdirectory
#   GOSRP_INTEROP_TESTS    space-separated tests to run instead of the default
#   GOSRP_INTEROP_MEM      guest memory in MiB (default 2048)
#   GOSRP_INTEROP_CPUS     guest vCPUs (default 2)
#   GOSRP_INTEROP_ACCEL    tcg (default) or kvm (hosts with real VT-x/AMD-V)
#   GOSRP_INTEROP_VERBOSE  1: same as -v
#   GOSRP_INTEROP_RETRIES  boots a failed test again up to this many times
#                          (default 1); a test that passes only on a retry is
#                          reported FLAKY, with the failed attempt's logs kept
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${GOSRP_INTEROP_CACHE:-$HOME/.cache/gosrp-interop}
export GOSRP_INTEROP_CACHE=$CACHE
export PATH=$PATH:/usr/local/go/bin

# Enabled by default: the tests that pass reliably (about the others:
# docs/INTEROP.md).
DEFAULT_TESTS=(lio-baseline srpctl-lio srptd-siw tmf misbehave multipath conformance perf verbs-rxe verbs-srpctl-lio verbs-perf rping)

verbose=${GOSRP_INTEROP_VERBOSE:-0}
tests=()
while [ $# -gt 0 ]; do
	case $1 in
	-v | --verbose) verbose=1 ;;
	--list)
		for f in "$HERE"/tests/*.sh; do
			n=$(basename "$f" .sh)
			d=" "
			[[ " ${DEFAULT_TESTS[*]} " == *" $n "* ]] && d="*"
			printf '%s %-14s %s\n' "$d" "$n" "$(sed -n 's/^# summary: //p' "$f")"
		done
		exit 0 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "run.sh: unknown option $1"; exit 2 ;;
	*) tests+=("$1") ;;
	esac
	shift
done
if [ ${#tests[@]} = 0 ]; then
	# shellcheck disable=SC2206
	if [ -n "${GOSRP_INTEROP_TESTS:-}" ]; then tests=($GOSRP_INTEROP_TESTS); else tests=("${DEFAULT_TESTS[@]}"); fi
fi
for t in "${tests[@]}"; do
	[ -f "$HERE/tests/$t.sh" ] || { echo "run.sh: no test $t (see --list)"; exit 2; }
done
say() { printf '[interop %s] %s\n' "$(date +%T)" "$*"; }

# ------------------------------------------------------------------ build
mkdir -p "$CACHE"
session=$(date +%Y%m%d-%H%M%S)-$$
t0=$SECONDS
# The guest image is shared: one build.sh at a time on this host.
exec 9>"$CACHE/.runbld.lck"
flock -w 3600 9 || { say "another interop run holds $CACHE/.runbld.lck"; exit 1; }
if ! timeout 3600 "$HERE/build.sh" 2>"$CACHE/build.log"; then
	tail -30 "$CACHE/build.log"
	say "guest build failed (log: $CACHE/build.log)"
	exit 1
fi
exec 9>&-
# The binaries are this run's own (concurrent runs may build other
# checkouts); removed when the run ends, and left-overs of killed runs after
# a day.
BIN=$CACHE/bin.$session
find "$CACHE" -maxdepth 1 -name 'bin.*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
mkdir -p "$BIN"
trap 'rm -rf "$BIN"' EXIT
LOGS=$CACHE/logs/$session
mkdir -p "$LOGS"
GOLOG=$LOGS/go-build.log
cmds=()
for c in srptd srpctl gorping; do   # a command without Go files yet is not built (its tests SKIP)
	compgen -G "$ROOT/cmd/$c/*.go" >/dev/null && cmds+=("./cmd/$c")
done
if [ ${#cmds[@]} -gt 0 ]; then
	if ! (cd "$ROOT" && CGO_ENABLED=0 timeout 1200 go build -o "$BIN/" "${cmds[@]}") >"$GOLOG" 2>&1; then
		cat "$GOLOG"
		say "go build ${cmds[*]} failed"
		exit 1
	fi
fi
# The libibverbs builds (cgo, -tags verbs: srptd-verbs, srpctl-verbs and the
# rdma/verbs test binary) link the host's glibc and libibverbs, which are
# bookworm's like the guest's.  Only tests that are named need them; without
# libibverbs-dev they are not built and those tests SKIP.
if [ -e /usr/include/infiniband/verbs.h ] && [ -e /usr/include/rdma/rdma_cma.h ]; then
	for c in srptd srpctl; do
		[ -e "$BIN/$c" ] || continue
		(cd "$ROOT" && CGO_ENABLED=1 timeout 1200 go build -tags verbs -o "$BIN/$c-verbs" "./cmd/$c") \
			>>"$GOLOG" 2>&1 || { say "note: $c-verbs did not build:"; tail -5 "$GOLOG"; }
	done
	(cd "$ROOT" && CGO_ENABLED=1 timeout 1200 go test -c -tags verbs -o "$BIN/verbs.test" ./rdma/verbs) \
		>>"$GOLOG" 2>&1 || { say "note: verbs.test did not build:"; tail -5 "$GOLOG"; }
fi
say "build ready in $((SECONDS - t0)) s; binaries: $(cd "$BIN" && echo * | sed 's/^\*$/none/')"

# ------------------------------------------------------------------ runs
# keep the 10 newest sessions
ls -1dt "$CACHE"/logs/*/ 2>/dev/null | tail -n +11 | xargs -r rm -rf

# One VM at a time on this host, whoever runs the suite.
exec 8>"$CACHE/.vm.lock"
flock -w 7200 8 || { say "another interop run holds $CACHE/.vm.lock"; exit 1; }

accel=${GOSRP_INTEROP_ACCEL:-tcg}
case $accel in
tcg) accel_opts=(-accel tcg,thread=multi,tb-size=256 -cpu qemu64) ;;
kvm) accel_opts=(-accel kvm -cpu host) ;;
*) echo "run.sh: GOSRP_INTEROP_ACCEL must be tcg or kvm"; exit 2 ;;
esac

# run_vm TEST DIR: boots the guest for one test; the guest writes DIR/rc.
run_vm() {
	local t=$1 dir=$2 tmo qpid tpid=
	tmo=$(sed -n 's/^# timeout: \([0-9]*\).*/\1/p' "$HERE/tests/$t.sh" | head -1)
	tmo=${tmo:-600}
	{
		printf 'GOSRP_TEST=%q\nGOSRP_TIMEOUT=%q\nGOSRP_ARGS=()\n' "$t" "$tmo"
	} >"$dir/env"
	: >"$dir/output.log"
	local q=(qemu-system-x86_64 -name "gosrp-interop-$t" -machine pc "${accel_opts[@]}"
		-smp "${GOSRP_INTEROP_CPUS:-2}" -m "${GOSRP_INTEROP_MEM:-2048}"
		-nodefaults -no-user-config -display none -no-reboot -nic none
		-kernel "$CACHE/kernel/vmlinux" -initrd "$CACHE/initramfs.cpio"
		-drive "file=$CACHE/rootfs.img,if=virtio,format=raw,readonly=on"
		-append "console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off"
		-chardev "file,id=con,path=$dir/console.log" -serial chardev:con
		-virtfs "local,path=$dir,mount_tag=gosrprun,security_model=none,id=run"
		-virtfs "local,path=$HERE,mount_tag=gosrpsuite,security_model=none,readonly=on,id=suite"
		-virtfs "local,path=$BIN,mount_tag=gosrpbin,security_model=none,readonly=on,id=bin")
	printf '%q ' "${q[@]}" >"$dir/qemu-cmdline"
	# the guest's own timeout fires first; this one covers boot, a hung
	# kernel and power-off
	timeout -k 10 $((tmo + 240)) "${q[@]}" </dev/null >"$dir/qemu.log" 2>&1 &
	qpid=$!
	VM_PID=$qpid
	if [ "$verbose" = 1 ]; then
		tail -n +1 -f --pid="$qpid" "$dir/output.log" | sed -u "s/^/[$t] /" &
		tpid=$!
	fi
	wait "$qpid" || true
	VM_PID=
	[ -z "$tpid" ] || wait "$tpid" || true
}

declare -A result figs secs
failed=0
VM_PID=
# an interrupted run takes its VM down with it (timeout passes the TERM on to qemu)
trap '[ -z "$VM_PID" ] || kill -TERM "$VM_PID" 2>/dev/null; say "interrupted; logs in $LOGS"; exit 130' INT TERM
retries=${GOSRP_INTEROP_RETRIES:-1}
for t in "${tests[@]}"; do
	attempt=0
	while :; do
		dir=$LOGS/$t
		[ $attempt = 0 ] || dir=$LOGS/$t.retry$attempt
		mkdir -p "$dir"
		say "$t: booting VM (${accel}, logs $dir)"
		s=$SECONDS
		run_vm "$t" "$dir"
		secs[$t]=$((SECONDS - s))
		rc=$(tr -dc '0-9' <"$dir/rc" 2>/dev/null || true)
		case ${rc:-none} in
		0) result[$t]=PASS ;;
		77) result[$t]=SKIP ;;
		none) result[$t]=FAIL; echo "guest did not report a status (died or hung)" >>"$dir/output.log" ;;
		124) result[$t]=FAIL; echo "test timed out" >>"$dir/output.log" ;;
		*) result[$t]=FAIL ;;
		esac
		figs[$t]=$(paste -sd' ' "$dir/figures" 2>/dev/null || true)
		if grep -aqE 'BUG:|Oops|Kernel panic|general protection' "$dir/console.log" "$dir/dmesg.txt" 2>/dev/null; then
			figs[$t]="${figs[$t]} [kernel BUG/Oops in dmesg]"
		fi
		say "$t: ${result[$t]} in ${secs[$t]} s"
		if [ "${result[$t]}" = FAIL ]; then
			if [ "$verbose" != 1 ]; then
				echo "---- $t: last lines of $dir/output.log"
				tail -n 40 "$dir/output.log"
			fi
			[ -s "$dir/rc" ] || { echo "---- $t: console"; tail -n 30 "$dir/console.log"; }
			echo "---- $t: logs in $dir (output.log, dmesg.txt, console.log)"
		fi
		if [ "${result[$t]}" = FAIL ] && [ $attempt -lt "$retries" ]; then
			attempt=$((attempt + 1))
			say "$t: failed; booting it again (attempt $((attempt + 1)))"
			continue
		fi
		if [ "${result[$t]}" = PASS ] && [ $attempt -gt 0 ]; then
			result[$t]=FLAKY
			figs[$t]="${figs[$t]} [failed first: $LOGS/$t]"
		fi
		break
	done
	[ "${result[$t]}" != FAIL ] || failed=1
done

echo
printf '%-14s %-6s %6s  %s\n' TEST RESULT TIME FIGURES
for t in "${tests[@]}"; do
	printf '%-14s %-6s %5ss  %s\n' "$t" "${result[$t]}" "${secs[$t]}" "${figs[$t]}"
done
echo "logs: $LOGS"
exit $failed
