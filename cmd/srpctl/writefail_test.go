package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWriteLUNReportsAcknowledgedPrefix: when one WRITE(16) fails while
// others are in flight, srpctl write's error names the lowest LBA that was
// not acknowledged and the bytes acknowledged before it, a piece
// acknowledged after the failure is reported apart and does not advance
// progress, the bar stays where acknowledgement stopped (not drawn to
// 100 %), and SYNCHRONIZE CACHE is still sent for what was acknowledged.
func TestWriteLUNReportsAcknowledgedPrefix(t *testing.T) {
	const bsz, bs, pieces = 512, 4096, 64
	const total = bs * pieces
	const firstLBA = 100
	badPiece := int64(9) // fails; piece 10 is held until it has failed, then acknowledged
	var (
		mu      sync.Mutex
		written = map[int64]bool{}
	)
	failed := make(chan struct{})
	write := func(ctx context.Context, off int64, n int) error {
		switch off / bs {
		case badPiece:
			time.Sleep(10 * time.Millisecond)
			defer close(failed)
			return errors.New("CHECK CONDITION 3/0c/00")
		case badPiece + 1:
			<-failed
		}
		mu.Lock()
		written[off] = true
		mu.Unlock()
		return nil
	}
	syncs := 0
	syncCache := func(context.Context) error { syncs++; return nil }
	bar := newBar(&bytes.Buffer{}, true, total, "write")
	err := writeLUN(context.Background(), total, bs, 4, bsz, firstLBA, bar, write, syncCache)
	var we *writeError
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T), want *writeError", err, err)
	}
	wantLBA := uint64(firstLBA + badPiece*bs/bsz)
	if we.LBA != wantLBA || we.Acked != badPiece*bs || we.Beyond < bs || !we.Synced || syncs != 1 {
		t.Fatalf("report %+v (syncs %d), want LBA %d, %d bytes acknowledged before it, piece %d acknowledged after, flushed", we, syncs, wantLBA, badPiece*bs, badPiece+1)
	}
	for off := int64(0); off < badPiece*bs; off += bs {
		if !written[off] {
			t.Fatalf("piece at %d counted as acknowledged but not written", off)
		}
	}
	if got := int64(bar.State().CurrentNum); got != badPiece*bs {
		t.Fatalf("progress at %d bytes, want the acknowledged prefix %d", got, badPiece*bs)
	}
	msg := err.Error()
	for _, want := range []string{"WRITE(16) at LBA 172 failed: CHECK CONDITION 3/0c/00", "36864 bytes acknowledged before it (LBA 100 to 171)", "more bytes acknowledged after it", "flushed by SYNCHRONIZE CACHE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}

	// A failure of the very first piece: nothing acknowledged, nothing to flush.
	syncs = 0
	bar = newBar(&bytes.Buffer{}, true, total, "write")
	err = writeLUN(context.Background(), total, bs, 1, bsz, 0, bar,
		func(context.Context, int64, int) error { return errors.New("channel down") }, syncCache)
	if !errors.As(err, &we) || we.LBA != 0 || we.Acked != 0 || syncs != 0 || bar.State().CurrentNum != 0 {
		t.Fatalf("first piece failing: %v %+v syncs %d", err, we, syncs)
	}
	// Everything acknowledged, the flush fails: the error says so.
	err = writeLUN(context.Background(), total, bs, 8, bsz, 0, newBar(&bytes.Buffer{}, true, total, "write"),
		func(context.Context, int64, int) error { return nil }, func(context.Context) error { return errors.New("MEDIUM ERROR") })
	if err == nil || !strings.Contains(err.Error(), "SYNCHRONIZE CACHE failed: MEDIUM ERROR: all 262144 bytes were acknowledged, but with the write cache on they may not be durable") {
		t.Fatalf("failed flush: %v", err)
	}
}

// TestBarNoCarriageReturnOffTerminal: the progress bar draws nothing when
// stderr is not a terminal (a log file or pipe would collect \r-redrawn
// lines), and draws on a terminal writer.
func TestBarNoCarriageReturnOffTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	b := (&copyFlags{}).bar(1<<20, "write")
	b.Add(1 << 19)
	b.Finish()
	os.Stderr = stderr
	w.Close()
	drawn, err := io.ReadAll(r)
	if err != nil || len(drawn) != 0 {
		t.Fatalf("bar on a pipe wrote %q (%v)", drawn, err)
	}
	var buf bytes.Buffer
	bar := newBar(&buf, false, 1<<20, "write")
	bar.Add(1 << 19)
	bar.Finish()
	if !strings.Contains(buf.String(), "\r") {
		t.Fatalf("the terminal bar drew nothing: %q", buf.String())
	}
}
