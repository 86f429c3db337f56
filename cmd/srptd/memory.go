package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// physicalMemory returns the machine's physical memory in bytes, 0 when
// unknown: a RAM LUN larger than it could never hold its data. Tests
// replace it to fix the machine's size.
var physicalMemory = func() int64 { return memTotal("/proc/meminfo") }

// memTotal reads the MemTotal line of a Linux meminfo file ("MemTotal:
// 16314252 kB", proc(5)) and returns it in bytes; 0 when the file or the
// line is missing or malformed.
func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb <= 0 || unit != "kB" || kb > maxSize>>10 {
			return 0
		}
		return kb << 10
	}
	return 0
}

// gibText formats a byte count in GiB with one decimal ("15.6 GiB").
func gibText(n int64) string {
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
