//go:build !linux

package backstore

// adviseHugePages does nothing where madvise(2) MADV_HUGEPAGE does not
// exist.
func adviseHugePages(addr uintptr, n int) {}
