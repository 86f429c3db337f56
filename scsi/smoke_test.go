package scsi

import (
	"context"
	"testing"

	"github.com/gosrp/gosrp/backstore"
)

func TestSmoke(t *testing.T) {
	tg := NewTarget(TargetConfig{})
	lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	s := tg.NewSession(Nexus{InitiatorPortID: "i", TargetPortID: "t", RelativeTargetPort: 1})
	defer s.Close()
	r := s.Execute(context.Background(), &Command{Tag: 1, CDB: []byte{0, 0, 0, 0, 0, 0}})
	if r.Status != StatusCheckCondition {
		t.Fatalf("%+v", r)
	}
	r = s.Execute(context.Background(), &Command{Tag: 1, CDB: []byte{0, 0, 0, 0, 0, 0}})
	if r.Status != StatusGood {
		t.Fatalf("%+v", r)
	}
	buf := make([]byte, 4096)
	wcdb := []byte{0x8A, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0}
	data := make([]byte, 4096)
	data[7] = 9
	r = s.Execute(context.Background(), &Command{Tag: 2, CDB: wcdb, DataOut: data})
	if r.Status != StatusGood {
		t.Fatalf("%+v", r)
	}
	rcdb := []byte{0x88, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0}
	r = s.Execute(context.Background(), &Command{Tag: 3, CDB: rcdb, DataIn: buf})
	if r.Status != StatusGood || r.DataInLen != 4096 || buf[7] != 9 {
		t.Fatalf("%+v", r)
	}
}
