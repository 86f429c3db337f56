package scsi

import (
	"bytes"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// LogicalUnit.Resize is not a task, so the task set does not order it
// against views: shrinking a RAM backstore must leave the views a READ
// was given (still being sent after its GOOD status) as they were.
func TestResizeKeepsHeldViews(t *testing.T) {
	ram := backstore.NewRAM(1 << 20)
	f := newFixture(t, LUConfig{Backstore: ram})
	ctx := testCtx(t)
	want := bytes.Repeat([]byte{0xA5}, 64<<10)
	if _, err := ram.WriteAt(want, 15*64<<10); err != nil { // the last chunk
		t.Fatal(err)
	}
	rd := &Command{Tag: 1, CDB: cdb16(0x88, 0, 15*128, 128), DataIn: make([]byte, 64<<10), ViewIn: true}
	if r := f.s.Execute(ctx, rd); r.Status != sense.StatusGood || len(rd.DataInViews) == 0 {
		t.Fatalf("READ: %+v, %d views", r, len(rd.DataInViews))
	}
	defer rd.ReleaseViews()
	// The fabric has not sent the data yet; an administrator shrinks the
	// logical unit by 32 KiB.
	if err := f.lu.Resize(1<<20 - 32<<10); err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(rd.DataInViews, nil); !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("the READ's held views changed under it after it completed GOOD: byte %d is %#x, was %#x", i, got[i], want[i])
	}
}
