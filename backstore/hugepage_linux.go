package backstore

import "golang.org/x/sys/unix"

// hugePageSize is the size of a transparent huge page on amd64 and arm64
// with 4 KiB base pages, bytes.
const hugePageSize = 2 << 20

// adviseHugePages asks the kernel to back the memory [addr, addr+n),
// widened to whole huge pages, with transparent huge pages (madvise(2)
// MADV_HUGEPAGE; a hint, for systems whose
// /sys/kernel/mm/transparent_hugepage/enabled is "madvise", Debian's
// default). A RAM LUN's data is reached at random across gigabytes, by the
// process and by the kernel's socket copies: on 4 KiB pages every 4 KiB
// touched wants its own TLB entry (on a paravirtualised machine with
// shadow page tables, its own shadow entry too), on huge pages one entry
// serves 2 MiB. The memory stays Go's: the hint changes how the kernel
// maps it, not who owns it. Errors are ignored (an old kernel, THP off).
func adviseHugePages(addr uintptr, n int) {
	start := addr &^ (hugePageSize - 1)
	end := (addr + uintptr(n) + hugePageSize - 1) &^ (hugePageSize - 1)
	unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_HUGEPAGE)
}
