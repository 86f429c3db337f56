package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/verbs"
)

// openDevice opens the rdma.Device of a port's transport: "iwarp" (the
// default: pure-Go iWARP over TCP) or "verbs" (libibverbs/librdmacm, only
// in binaries built with -tags verbs). nodeGUID is the device's node GUID
// when it has one (verbs), else 0.
func openDevice(p PortSection, log *slog.Logger) (dev rdma.Device, nodeGUID uint64, err error) {
	switch p.Transport {
	case "", "iwarp":
		return iwarp.NewDevice(iwarp.Config{Logger: log, CRC: p.MPACRC, CompleteOnTransmit: !p.CompletionFences}), 0, nil
	case "verbs":
		if !verbs.Built {
			return nil, 0, errors.New("transport \"verbs\": this srptd was built without RDMA verbs support (rebuild with cgo and -tags verbs)")
		}
		d, err := verbs.Open(verbs.Config{DeviceName: p.Device, Port: p.DevicePort, BusyPoll: p.BusyPoll, Logger: log})
		if err != nil {
			return nil, 0, fmt.Errorf("transport \"verbs\": %w", err)
		}
		return d, d.Info().NodeGUID, nil
	}
	return nil, 0, fmt.Errorf("unknown transport %q (want iwarp or verbs)", p.Transport)
}
