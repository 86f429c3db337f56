package verbs

import (
	"fmt"
	"log/slog"
)

// Config selects the RDMA device a Device uses.
type Config struct {
	// DeviceName is the ibv device name ("mlx5_0", "rxe0", "siw0"). Empty
	// picks the first device.
	DeviceName string
	// Port is the device port (1-based) whose GID names the target port.
	// Zero means 1.
	Port int
	// BusyPoll makes Poll spin on the completion queue instead of sleeping on
	// the completion channel (lower latency, one core per polling goroutine).
	BusyPoll bool
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// PortInfo describes one port of a device.
type PortInfo struct {
	Port      int      // 1-based port number
	GID0      [16]byte // GID index 0 (for RoCE/iWARP derived from the netdev address)
	LinkLayer string   // "InfiniBand" or "Ethernet"
	Active    bool
}

// GUIDName is the port's name as Linux ib_srpt gives it (srpt_refresh_port:
// srpt_format_guid of the interface ID, bytes 8..15, of GID index 0): four
// groups of four lowercase hex digits, "fe80:...:" prefix dropped, e.g.
// "0002:c903:000e:8acd". It names the port's target (wwn) in LIO configfs
// and so the SCSI target port in VPD page 83h of an ib_srpt LUN.
func (p PortInfo) GUIDName() string {
	g := p.GID0[8:]
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7])
}

// GIDName is ib_srpt's other name for the port: "0x" and the 32 lowercase
// hex digits of GID index 0 (subnet prefix, then interface ID).
func (p PortInfo) GIDName() string {
	return fmt.Sprintf("0x%x", p.GID0[:])
}

// Port returns the description of port n (1-based), if the device has it.
func (d DeviceInfo) Port(n int) (PortInfo, bool) {
	for _, p := range d.Ports {
		if p.Port == n {
			return p, true
		}
	}
	return PortInfo{}, false
}

// DeviceInfo describes an RDMA device as ibv_query_device reports it.
type DeviceInfo struct {
	Name      string
	NodeGUID  uint64 // host byte order
	Transport string // "InfiniBand" or "iWARP"
	Ports     []PortInfo
}

func (d DeviceInfo) String() string {
	return fmt.Sprintf("%s (node GUID %016x, %s, %d ports)", d.Name, d.NodeGUID, d.Transport, len(d.Ports))
}
