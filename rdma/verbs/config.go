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
