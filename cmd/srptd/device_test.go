package main

import (
	"log/slog"
	"testing"

	"github.com/gosrp/gosrp/rdma/verbs"
)

// An rxe device on a NIC with MAC 52:54:00:12:34:56: node GUID and GID 0's
// interface ID are the EUI-64 of the MAC (U/L bit flipped). The expected
// names are ib_srpt's formats applied by hand.
func TestSrptIdentity(t *testing.T) {
	info := verbs.DeviceInfo{
		Name:     "rxe0",
		NodeGUID: 0x505400fffe123456,
		Ports: []verbs.PortInfo{{Port: 1,
			GID0: [16]byte{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}}},
	}
	for _, port := range []int{0, 1} {
		id, ok := srptIdentityOf(info, port)
		if !ok {
			t.Fatalf("port %d not found", port)
		}
		want := srptIdentity{port: 1, serviceGUID: 0x505400fffe123456,
			portName: "5054:00ff:fe12:3456", portGIDName: "0xfe80000000000000505400fffe123456"}
		if id != want {
			t.Errorf("port %d: %+v, want %+v", port, id, want)
		}
	}
	if _, ok := srptIdentityOf(info, 2); ok {
		t.Error("port 2 of a one-port device found")
	}
}

func TestTargetPortNameIWARP(t *testing.T) {
	dev, guid, err := openDevice(PortSection{Transport: "iwarp"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if n := targetPortName(dev, PortSection{Transport: "iwarp"}); n != "" || guid != 0 {
		t.Fatalf("iwarp port: name %q, node GUID %#x; want none", n, guid)
	}
}
