package target

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp/initiator"
)

// With MPA CRC, RDMA WRITEs sent from a RAM backstore's memory while
// SIMPLE WRITEs change the same blocks (their order is unspecified, so the
// core allows it): the bytes sent must be those the CRC covers, or the
// initiator sees a bad CRC and terminates the connection.
func TestViewsWithCRCAndOverlappingWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := scsi.NewTarget(scsi.TargetConfig{})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(8 << 20), BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	tdev := iwarp.NewDevice(iwarp.Config{Logger: log, CRC: true})
	defer tdev.Close()
	port, err := NewPort(Config{ServiceGUID: testGUID, DemoMode: true, Logger: log}, tdev, scsiCore{st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tdev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = port.Serve(ctx, l) }()
	defer port.Close(context.Background())
	idev := iwarp.NewDevice(iwarp.Config{Logger: log, CRC: true})
	defer idev.Close()
	_, portStr, _ := net.SplitHostPort(l.Addr().String())
	s, err := initiator.Dial(ctx, idev, initiator.Options{IDExt: testGUID, IOCGUID: testGUID,
		Dest: "127.0.0.1:" + portStr, ChCount: 1, MaxSect: 4096, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		_, _ = s.Execute(ctx, &initiator.Command{CDB: make([]byte, 6)})
	}
	const n = 1 << 20
	cdb := func(op byte) []byte {
		c := make([]byte, 16)
		c[0] = op
		binary.BigEndian.PutUint32(c[10:], n/512)
		return c
	}
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := w%2 == 0
			buf, err := s.NewBuffer(n, in)
			if err != nil {
				errs <- err
				return
			}
			for k := 0; time.Now().Before(deadline); k++ {
				op := byte(0x8a)
				if in {
					op = 0x88
				} else {
					b := buf.Bytes()
					for i := range b {
						b[i] = byte(k + i)
					}
				}
				r, err := s.Execute(ctx, &initiator.Command{CDB: cdb(op), Buffer: buf, Length: n})
				if err != nil || r.Status != 0 {
					errs <- fmt.Errorf("op %#x: err %v, status %#x, sense % x", op, err, r.Status, r.Sense)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("I/O failed (reads sent from the backstore while writes change it): %v", err)
	}
}
