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
// when it has one (verbs), else 0. A verbs device is logged at Info with
// the names ib_srpt would give the same HCA port (see srptIdentityOf).
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
		if id, ok := srptIdentityOf(d.Info(), p.DevicePort); ok {
			log.Info("verbs device", "device", d.Info().Name, "device_port", id.port,
				"node_guid", fmt.Sprintf("%016x", id.serviceGUID), "srpt_port", id.portName, "srpt_port_gid", id.portGIDName)
		}
		return d, d.Info().NodeGUID, nil
	}
	return nil, 0, fmt.Errorf("unknown transport %q (want iwarp or verbs)", p.Transport)
}

// srptIdentity is how Linux ib_srpt identifies one HCA port, so that an
// srptd port on the same device can be addressed and named the same way.
type srptIdentity struct {
	port int // 1-based HCA port
	// serviceGUID is ib_srpt's srpt_service_guid when the module parameter
	// is not set: the node GUID (be64_to_cpu(node_guid)). It is id_ext and
	// ioc_guid of the SRP target port ID and the IB CM service ID.
	serviceGUID uint64
	// portName is the port's GUID-form name ("%04x:%04x:%04x:%04x" of GID
	// 0's interface ID, srpt_refresh_port), one of the two LIO configfs
	// accepts as the target directory.
	portName string
	// portGIDName is ib_srpt's other name for the port: "0x" and the 32
	// hex digits of GID 0. It is the target name ib_srpt reports, whichever
	// of the two configfs used: srpt_make_tport copies gid_name into a new
	// target unless the target is already sport->guid_id, which it becomes
	// only afterwards (Linux 5.15 on; LIO's VPD page 83h on Debian 12's
	// kernel reads "0xfe80...,t,0x0001" for a target made as "xxxx:...").
	portGIDName string
}

// srptIdentityOf returns the identity ib_srpt would give port (0 means 1) of
// the device described by info; false when the device has no such port.
func srptIdentityOf(info verbs.DeviceInfo, port int) (srptIdentity, bool) {
	if port == 0 {
		port = 1
	}
	pi, ok := info.Port(port)
	if !ok {
		return srptIdentity{}, false
	}
	return srptIdentity{port: port, serviceGUID: info.NodeGUID, portName: pi.GUIDName(), portGIDName: pi.GIDName()}, true
}

// targetPortName is the SCSI target port name ib_srpt gives the HCA port
// of a verbs port section (srptIdentity.portGIDName: its LUNs report
// "<name>,t,0x0001" in the SCSI name string designator of VPD page 83h,
// spc_emulate_evpd_83 with tag 1), or "" for a device without one (iwarp).
func targetPortName(dev rdma.Device, p PortSection) string {
	d, ok := dev.(*verbs.Device)
	if !ok {
		return ""
	}
	id, ok := srptIdentityOf(d.Info(), p.DevicePort)
	if !ok {
		return ""
	}
	return id.portGIDName
}
