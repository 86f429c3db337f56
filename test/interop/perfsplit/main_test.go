package main

import (
	"strings"
	"testing"
)

// Three samples as perf script prints them (-F comm,tid,time,ip,sym,dso,
// call chains innermost first).
const script = `swapper     0    22.507507: 
	ffffffff81a592eb native_safe_halt ([kernel.kallsyms])
	ffffffff8103ed0d amd_e400_idle ([kernel.kallsyms])

srptd-verbs   179    22.511144: 
	ffffffffc0467566 rdma_read_gid_attr_ndev_rcu ([kernel.kallsyms])
	ffffffffc056359f rxe_init_packet ([kernel.kallsyms])
	ffffffffc055e0dd rxe_post_send ([kernel.kallsyms])
	ffffffff81a43e1d do_syscall_64 ([kernel.kallsyms])
	           f838f write (/usr/lib/x86_64-linux-gnu/libc.so.6)

ksoftirqd/1   20    22.512000: 
	ffffffff81a43e1d read_hpet ([kernel.kallsyms])
	ffffffff81a43e1d ktime_get ([kernel.kallsyms])

srptd-verbs   171    22.513000: 
	ffffffff81a43e1d finish_task_switch.isra.0 ([kernel.kallsyms])
	ffffffff81a43e1d __schedule ([kernel.kallsyms])
	          4a0b1c runtime.usleep.abi0 (/gosrp/bin/srptd-verbs)
	          4a0b1c runtime.sysmon (/gosrp/bin/srptd-verbs)
`

func TestCategories(t *testing.T) {
	ss, err := readSamples(strings.NewReader(script))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"idle", "rxe (srptd-verbs)", "clock reads (ksoftirqd)", "Go sysmon"}
	if len(ss) != len(want) {
		t.Fatalf("%d samples, want %d: %+v", len(ss), len(want), ss)
	}
	for i, s := range ss {
		if got := category(s); got != want[i] {
			t.Errorf("sample %d (%s %v): category %q, want %q", i, s.comm, s.frames, got, want[i])
		}
	}
	if f := ss[1].frames; len(f) != 5 || f[1] != "rxe_init_packet" || f[4] != "write" {
		t.Errorf("frames of sample 1: %q", f)
	}
}

// TestSplit: four samples over two CPUs at 1000 I/Os per second are
// 2000 µs of guest CPU per I/O, a quarter of it each.
func TestSplit(t *testing.T) {
	ss, err := readSamples(strings.NewReader(script))
	if err != nil {
		t.Fatal(err)
	}
	rows := split(ss, 1000, 2)
	want := []string{"Go sysmon", "clock reads (ksoftirqd)", "idle", "rxe (srptd-verbs)"}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	for i, r := range rows {
		if r.cat != want[i] || r.us != 500 {
			t.Errorf("row %d: %+v, want %s 500 µs", i, r, want[i])
		}
	}
}

func TestReadSamplesRejectsOtherText(t *testing.T) {
	for _, in := range []string{"hello world\n\tffff f (x)\n", "\x1f\x8b\x08garbage\n"} {
		if ss, err := readSamples(strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error, samples %+v", in, ss)
		}
	}
	// A command name with a space in it.
	ss, err := readSamples(strings.NewReader("Web Content  12  1.5: \n\tffff foo ([kernel.kallsyms])\n"))
	if err != nil || len(ss) != 1 || ss[0].comm != "Web Content" || len(ss[0].frames) != 1 || ss[0].frames[0] != "foo" {
		t.Errorf("samples %+v, err %v", ss, err)
	}
}
