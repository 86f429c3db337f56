#!/usr/bin/env bash
# Builds the guest of the interop suite, once, into the cache directory
# ${GOSRP_INTEROP_CACHE:-~/.cache/gosrp-interop} (outside the checkout):
#
#   vmlinux             Debian's kernel, uncompressed ELF (qemu boots it via
#                       PVH, which skips the slow in-guest decompression)
#   siw/siw.ko          soft-iWARP, built out of tree from Debian's own
#                       linux-source and linux-headers of the same version
#                       (Debian's 6.1 kernel has CONFIG_RDMA_SIW unset)
#   rootfs/             Debian bookworm userland (mmdebstrap)
#   rootfs.img          read-only ext4 image: rootfs + kernel modules + init
#   initramfs.cpio      stage 1: static busybox + what it takes to mount the
#                       image under a tmpfs overlay
#
# Each step is keyed by a hash stamp of its inputs and skipped when the stamp
# matches, so a warm call takes well under a second.  Needs root (mmdebstrap
# --mode=root, device nodes) and Debian's apt archive; scripts/deps.sh
# installs the host packages.
#
# Environment:
#   GOSRP_INTEROP_CACHE           cache directory
#   GOSRP_INTEROP_KERNEL_ABI      kernel ABI name     (pinned: 6.1.0-57-amd64)
#   GOSRP_INTEROP_KERNEL_VERSION  its package version (pinned: 6.1.192-3)
#   GOSRP_INTEROP_MIRROR          Debian mirror for the root filesystem
#                                 (default: the host's apt source)
#   GOSRP_INTEROP_EXTRA_PKGS      more Debian packages for the guest, space
#                                 separated (linux-perf: verbs-profile then
#                                 also records the whole guest with perf);
#                                 best with a cache directory of its own
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${GOSRP_INTEROP_CACHE:-$HOME/.cache/gosrp-interop}
# The kernel is pinned: `apt-cache policy linux-image-amd64` on bookworm
# (bookworm-security) gave this version when the suite was written.
KABI=${GOSRP_INTEROP_KERNEL_ABI:-6.1.0-57-amd64}
KPKGVER=${GOSRP_INTEROP_KERNEL_VERSION:-6.1.192-3}
KMM=${KABI%%.0-*}                  # 6.1
KCOMMON=${KABI%-amd64}-common      # 6.1.0-57-common
SUITE=bookworm

# Guest user space.
PKGS=(
	kmod iproute2 procps util-linux mount
	rdma-core ibverbs-providers ibverbs-utils libibverbs1 librdmacm1 rdmacm-utils
	fio sg3-utils libiscsi-bin lsscsi e2fsprogs tcpdump
	multipath-tools
)
read -ra extra <<<"${GOSRP_INTEROP_EXTRA_PKGS:-}"
PKGS+=("${extra[@]}")
# Kernel modules for the guest (their dependencies come along).
MODULES=(
	virtio_pci 9p 9pnet_virtio configfs overlay ext4 dummy loop
	ib_core ib_uverbs ib_umad rdma_ucm rdma_cm iw_cm ib_cm rdma_rxe siw
	ib_srp scsi_transport_srp ib_srpt
	target_core_mod target_core_iblock target_core_file
	sd_mod sg crc32_generic crc32c_generic libcrc32c
	dm_multipath dm_service_time dm_round_robin scsi_dh_alua
)
# Stage 1 loads these (in dependency order) to mount the root image.
STAGE1_MODULES=(virtio_pci virtio_blk crc32c_generic ext4 overlay)

log() { printf '[interop-build %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
hash16() { sha256sum | cut -c1-16; }

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap --mode=root, mknod)"
missing=()
for t in qemu-system-x86_64 mmdebstrap cpio mkfs.ext4 depmod modprobe gcc-12 make xz dpkg-deb apt-get; do
	command -v "$t" >/dev/null || missing+=("$t")
done
[ -e /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || missing+=("static /bin/busybox (busybox-static)")
[ -e /usr/lib/x86_64-linux-gnu/libelf.so.1 ] || missing+=("libelf1 (objtool)")
[ ${#missing[@]} = 0 ] || die "missing host tools: ${missing[*]} -- run scripts/deps.sh"

mkdir -p "$CACHE/debs"
exec 9>"$CACHE/.guest-build.lock"   # run.sh holds .build.lock around this script
flock -w 3600 9 || die "another build holds $CACHE/.guest-build.lock"
t_start=$SECONDS

# ------------------------------------------------------------ Debian packages
# fetch PKG: path of PKG_$KPKGVER_*.deb in the cache, downloading it if needed.
fetch() {
	local p=$1 f
	f=$(ls "$CACHE/debs/${p}_${KPKGVER}_"*.deb 2>/dev/null | head -1 || true)
	if [ -z "$f" ]; then
		log "apt-get download $p=$KPKGVER"
		if ! (cd "$CACHE/debs" && apt-get download "$p=$KPKGVER") >"$CACHE/apt-download.log" 2>&1; then
			log "apt-get download failed; running apt-get update once and trying again"
			apt-get update >>"$CACHE/apt-download.log" 2>&1 || true
			(cd "$CACHE/debs" && apt-get download "$p=$KPKGVER") >>"$CACHE/apt-download.log" 2>&1 ||
				die "$(printf '%s\n' \
					"cannot download $p version $KPKGVER from apt (see $CACHE/apt-download.log)." \
					"The suite pins kernel $KABI ($KPKGVER); if the archive moved on, set" \
					"GOSRP_INTEROP_KERNEL_ABI/GOSRP_INTEROP_KERNEL_VERSION to what" \
					"'apt-cache policy linux-image-amd64' and 'apt-cache depends linux-image-amd64' show.")"
		fi
		f=$(ls "$CACHE/debs/${p}_${KPKGVER}_"*.deb | head -1)
	fi
	echo "$f"
}

# ------------------------------------------------------------------- kernel
KDIR=$CACHE/kernel
k_stamp=$(printf '%s\n' "$KABI" "$KPKGVER" k1 | hash16)
if [ "$(cat "$KDIR/.stamp" 2>/dev/null)" != "$k_stamp" ]; then
	deb=$(fetch "linux-image-$KABI")
	log "unpacking $(basename "$deb")"
	rm -rf "$KDIR" && mkdir -p "$KDIR"
	dpkg -x "$deb" "$KDIR/root"
	# vmlinuz is a bzImage with an xz-compressed ELF inside: cut it out for PVH boot.
	bz=$KDIR/root/boot/vmlinuz-$KABI
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" | head -1 | cut -d: -f1 || true)
	[ -n "$off" ] || die "no xz stream in $bz"
	tail -c +"$((off + 1))" "$bz" | xz -dc --single-stream >"$KDIR/vmlinux" 2>/dev/null || true
	[ "$(head -c 4 "$KDIR/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] ||
		die "could not extract an ELF vmlinux from $bz"
	echo "$k_stamp" >"$KDIR/.stamp"
fi
MODDIR=$KDIR/root/lib/modules/$KABI

# ------------------------------------------------------------- siw.ko
SIWDIR=$CACHE/siw
siw_stamp=$(printf '%s\n' "$KABI" "$KPKGVER" "$(gcc-12 --version | head -1)" s1 | hash16)
if [ "$(cat "$SIWDIR/.stamp" 2>/dev/null)" != "$siw_stamp" ]; then
	t=$SECONDS
	log "building siw.ko out of tree for $KABI"
	rm -rf "$SIWDIR" && mkdir -p "$SIWDIR/kbuild" "$SIWDIR/src"
	for p in "linux-headers-$KABI" "linux-headers-$KCOMMON" "linux-kbuild-$KMM"; do
		dpkg -x "$(fetch "$p")" "$SIWDIR/kbuild"
	done
	HDR=$SIWDIR/kbuild/usr/src/linux-headers-$KABI
	# Its Makefile includes the -common tree by absolute path under /usr/src.
	sed -i "s|^include /usr/src/|include $SIWDIR/kbuild/usr/src/|" "$HDR/Makefile"
	src=$(fetch "linux-source-$KMM")
	# Only drivers/infiniband/sw/siw out of the source tarball.
	dpkg-deb --fsys-tarfile "$src" | tar -xO "./usr/src/linux-source-$KMM.tar.xz" |
		tar -xJ -C "$SIWDIR/src" --strip-components=5 --wildcards "linux-source-$KMM/drivers/infiniband/sw/siw/*"
	[ -s "$SIWDIR/src/siw_main.c" ] || die "siw sources not found in $src"
	make -C "$HDR" M="$SIWDIR/src" CONFIG_RDMA_SIW=m -j2 modules >"$SIWDIR/build.log" 2>&1 ||
		{ tail -20 "$SIWDIR/build.log" >&2; die "siw.ko build failed, see $SIWDIR/build.log"; }
	vm() { tr '\0' '\n' <"$1" | grep -a '^vermagic='; }
	want=$(vm "$MODDIR/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko")
	got=$(vm "$SIWDIR/src/siw.ko")
	[ -n "$want" ] && [ "$want" = "$got" ] || die "siw.ko $got does not match the kernel's $want"
	cp "$SIWDIR/src/siw.ko" "$SIWDIR/siw.ko"
	rm -rf "$SIWDIR/kbuild"   # 200 MB, only needed for this build
	echo "$siw_stamp" >"$SIWDIR/.stamp"
	log "siw.ko built in $((SECONDS - t)) s"
fi

# ------------------------------------------------------------ root filesystem
host_mirror() {
	local u
	u=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}' \
		/etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
	[ -n "$u" ] || u=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
	echo "${u:-http://deb.debian.org/debian}"
}
MIRROR=${GOSRP_INTEROP_MIRROR:-$(host_mirror)}
ROOTFS=$CACHE/rootfs
r_stamp=$(printf '%s\n' "$SUITE" "$MIRROR" "${PKGS[@]}" r1 | hash16)
if [ "$(cat "$ROOTFS/.gosrp-stamp" 2>/dev/null)" != "$r_stamp" ]; then
	t=$SECONDS
	log "mmdebstrap $SUITE from $MIRROR (${#PKGS[@]} packages)"
	rm -rf "$ROOTFS" "$ROOTFS.tmp"
	timeout 1800 mmdebstrap --variant=minbase --mode=root \
		--aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--include="$(IFS=,; echo "${PKGS[*]}")" \
		"$SUITE" "$ROOTFS.tmp" "$MIRROR" >"$CACHE/mmdebstrap.log" 2>&1 ||
		die "mmdebstrap failed, see $CACHE/mmdebstrap.log"
	rm -rf "$ROOTFS.tmp"/var/cache/apt/* "$ROOTFS.tmp"/var/lib/apt/lists/* "$ROOTFS.tmp"/var/log/*
	echo "$r_stamp" >"$ROOTFS.tmp/.gosrp-stamp"
	mv "$ROOTFS.tmp" "$ROOTFS"
	log "root filesystem built in $((SECONDS - t)) s"
fi

# ------------------------------------------------ root image + stage 1 initramfs
IMG=$CACHE/rootfs.img
INITRD=$CACHE/initramfs.cpio
g_hash=$(cat "$HERE/guest/init" "$HERE/guest/stage1-init" | hash16)
i_stamp=$(printf '%s\n' "$r_stamp" "$k_stamp" "$siw_stamp" "${MODULES[@]}" "${STAGE1_MODULES[@]}" "$g_hash" i1 | hash16)
if [ "$(cat "$IMG.stamp" 2>/dev/null)" != "$i_stamp" ] || [ ! -s "$IMG" ] || [ ! -s "$INITRD" ]; then
	t=$SECONDS
	log "assembling root image"
	ST=$CACHE/stage
	rm -rf "$ST" "$CACHE/mods"
	# Module closure, computed on a full module tree (+ siw.ko in updates/).
	FULL=$CACHE/mods
	mkdir -p "$FULL/lib/modules"
	cp -al "$MODDIR" "$FULL/lib/modules/$KABI"
	mkdir -p "$FULL/lib/modules/$KABI/updates"
	cp "$SIWDIR/siw.ko" "$FULL/lib/modules/$KABI/updates/siw.ko"
	depmod -b "$FULL" "$KABI"
	closure() {
		local m
		for m in "$@"; do
			modprobe -d "$FULL" -S "$KABI" --show-depends "$m" || die "no module $m for $KABI"
		done | awk '$1 == "insmod" {print $2}' | sed "s|^$FULL||" | awk '!seen[$0]++'
	}
	keep=$(closure "${MODULES[@]}" "${STAGE1_MODULES[@]}")
	stage1=$(closure "${STAGE1_MODULES[@]}")

	cp -al "$ROOTFS" "$ST"
	rm -f "$ST/.gosrp-stamp"
	rm -rf "$ST/lib/modules" && mkdir -p "$ST/lib/modules/$KABI"
	cp "$MODDIR"/modules.{builtin,builtin.modinfo,order} "$ST/lib/modules/$KABI/"
	n=0
	for f in $keep; do
		mkdir -p "$ST$(dirname "$f")"
		cp "$FULL$f" "$ST$f"
		n=$((n + 1))
	done
	depmod -b "$ST" "$KABI"
	install -m 0755 "$HERE/guest/init" "$ST/init"
	mkdir -p "$ST/gosrp/run" "$ST/gosrp/suite" "$ST/gosrp/bin" "$ST/etc/target"
	echo gosrp-interop >"$ST/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 gosrp-interop\n' >"$ST/etc/hosts"
	: >"$ST/etc/fstab"
	echo "$KABI" >"$ST/gosrp/kernel"
	mb=$(($(du -sm "$ST" | cut -f1) * 12 / 10 + 64))
	rm -f "$IMG.tmp"
	mkfs.ext4 -q -F -L gosrp -O ^has_journal -E root_owner=0:0 -d "$ST" "$IMG.tmp" "${mb}M" >/dev/null ||
		die "mkfs.ext4 -d failed"

	S1=$CACHE/stage1
	rm -rf "$S1" && mkdir -p "$S1"/{bin,dev,proc,sys,lower,rw,newroot}
	cp /bin/busybox "$S1/bin/busybox"
	install -m 0755 "$HERE/guest/stage1-init" "$S1/init"
	: >"$S1/modules"
	for f in $stage1; do
		mkdir -p "$S1$(dirname "$f")"
		cp "$FULL$f" "$S1$f"
		echo "$f" >>"$S1/modules"
	done
	mknod -m 600 "$S1/dev/console" c 5 1
	(cd "$S1" && find . -mindepth 1 -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$INITRD.tmp"
	mv "$IMG.tmp" "$IMG"
	mv "$INITRD.tmp" "$INITRD"
	echo "$i_stamp" >"$IMG.stamp"
	rm -rf "$ST" "$S1" "$FULL"
	log "root image: $n modules, ${mb} MiB, built in $((SECONDS - t)) s"
fi
[ $((SECONDS - t_start)) -lt 2 ] || log "build done in $((SECONDS - t_start)) s"
