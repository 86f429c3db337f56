package target

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults and limits of the tunables, after Linux ib_srpt (module
// parameters and configfs tpg attributes).
const (
	DefaultMaxReqSize  = 8276    // bytes; ib_srpt srp_max_req_size
	MinMaxReqSize      = 96      // bytes; below this an SRP_CMD with one descriptor does not fit
	DefaultMaxRspSize  = 256     // bytes; ib_srpt srp_max_rsp_size
	MinMaxRspSize      = 40      // bytes
	MaxMaxRspSize      = 1024    // bytes
	DefaultSQSize      = 4096    // work requests; ib_srpt srp_sq_size
	DefaultRQSize      = 128     // IUs; ib_srpt rq_size = min(128, max_qp_wr)
	DefaultMaxRDMASize = 1 << 20 // bytes per RDMA READ/WRITE work request
	DefaultMaxDataLen  = 16 << 20
	// DefaultMaxDataMemory is the default port-wide budget of command data
	// buffers, in bytes (32 commands of DefaultMaxDataLen).
	DefaultMaxDataMemory = 512 << 20
	DefaultMaxChannels   = 16
	// DefaultMaxTotalChannels bounds the channels of one port.
	DefaultMaxTotalChannels = 1024
	DefaultSRQSize          = 4095 // receive buffers; ib_srpt srpt_srq_size
	DefaultLoginTimeout     = 10 * time.Second
)

// Config configures one SRP target port. Zero fields take the defaults
// above.
type Config struct {
	// ServiceGUID is the port's identity: id_ext and ioc_guid of the SRP
	// target port ID (T10 SRP r16a §4.5: target port ID = id_ext ||
	// ioc_guid) and, on InfiniBand, the CM service ID.
	ServiceGUID uint64
	// Name names the port in logs and the admin API.
	Name string
	// RelativePort is the SPC-4 relative target port identifier, 1-based
	// (0 means 1).
	RelativePort uint16
	// TargetPortName is the SCSI target port name its LUNs report in VPD
	// page 83h (scsi.Nexus.TargetPortName); empty reports none. On an HCA
	// port, ib_srpt's GID-form port name (srpt_make_tport).
	TargetPortName string

	// MaxReqSize is the largest IU the initiator may send, in bytes
	// (LOGIN_RSP max_it_iu_len). It sizes each receive buffer.
	MaxReqSize int
	// MaxRspSize is the largest IU the target sends, in bytes. It sizes
	// each send buffer; sense data is truncated to fit.
	MaxRspSize int
	// SQSize is the send queue depth in work requests (RDMA READ/WRITE and
	// SEND).
	SQSize int
	// RQSize is the receive ring size in IUs; it is also the initial
	// request limit (LOGIN_RSP req_lim_delta).
	RQSize int
	// MaxRDMASize is the most bytes one RDMA READ or WRITE work request
	// moves; longer descriptors are split.
	MaxRDMASize int
	// MaxDataLen is the largest data buffer of one command, in bytes.
	// Larger descriptors get CHECK CONDITION, INVALID FIELD IN CDB.
	MaxDataLen int
	// MaxDataMemory is the most bytes of command data buffers (and
	// fetched descriptor tables) the port holds at once, over all its
	// channels. Each buffer counts its size class: the descriptor's total
	// length rounded up to a power of two, at least 4096. A command whose
	// buffer would go beyond it is not started: it is answered at once with
	// SCSI status TASK SET FULL (0x28) in an SRP_RSP returning its credit,
	// and the initiator retries it later. A buffer is given back when its
	// command completes, is aborted, or its channel closes. Must be at
	// least MaxDataLen's size class; 0 means DefaultMaxDataMemory, or that
	// size class when it is larger.
	MaxDataMemory int
	// MaxChannels is the most channels one I_T nexus may open (LOGIN_REJ
	// 0x10006 beyond it).
	MaxChannels int
	// MaxTotalChannels is the most channels the port holds at once, over
	// all I_T nexuses, counting channels still draining (they keep their
	// rings until released) and connections whose IU-form login has not
	// arrived yet. Beyond it a login is refused with LOGIN_REJ 0x10001
	// (insufficient RDMA channel resources, T10 SRP r16a §6.4 table 11:
	// the port's resources, not the initiator's quota that 0x10006 names).
	// Without a shared receive queue each channel registers a receive ring
	// of 2*RQSize+4 buffers of MaxReqSize bytes rounded up to 512 (with
	// the defaults 260 × 8704 bytes ≈ 2.2 MiB) and a send ring of RQSize+2
	// buffers of MaxRspSize bytes (≈ 33 KiB), so the default bound is
	// about 2.3 GiB of registered memory; lower it, or use UseSRQ, on
	// small hosts. 0 means DefaultMaxTotalChannels.
	MaxTotalChannels int
	// UseSRQ makes every channel of the port take its receive buffers from
	// one shared receive queue of SRQSize buffers (ib_srpt use_srq),
	// instead of a ring of 2*RQSize+4 buffers each: memory stays
	// SRQSize*MaxReqSize bytes however many channels log in. The device
	// must implement rdma.SRQDevice, else NewPort fails with ErrNoSRQ.
	// The buffers are shared, not reserved: when the channels together
	// hold more IUs than SRQSize (each may hold up to 2*RQSize), further
	// SENDs wait for a buffer (RNR on InfiniBand; fatal to the connection
	// on iWARP, which has no RNR retry), so size SRQSize for the expected
	// load, as with ib_srpt's srpt_srq_size.
	UseSRQ bool
	// SRQSize is the shared receive queue's depth in receive buffers
	// (IUs), 4..65535; 0 means DefaultSRQSize. Used only with UseSRQ.
	SRQSize int
	// NoMultichannel refuses MULTI logins (LOGIN_REJ 0x10005).
	NoMultichannel bool
	// NoImmediateData refuses SRP-2 immediate data (IMMED_SUPP is not set in
	// the LOGIN_RSP).
	NoImmediateData bool

	// DemoMode admits every initiator, with every LUN of the core visible.
	DemoMode bool
	// ACLs admit initiators when DemoMode is off; the first match wins.
	ACLs []ACL

	// LoginTimeout bounds how long a connection accepted without a login in
	// its private data waits for the SRP_LOGIN_REQ IU; then it is closed,
	// so idle connections cannot hold receive rings and MaxTotalChannels
	// places. 0 means DefaultLoginTimeout.
	LoginTimeout time.Duration
	// LogoutTimeout bounds how long a close waits for the SRP_T_LOGOUT
	// send to complete before tearing the connection down. Zero means 2 s.
	LogoutTimeout time.Duration
	// Logger receives the port's log; nil discards.
	Logger *slog.Logger
	// Clock runs the port's timers (LoginTimeout, LogoutTimeout); nil is
	// the system clock. Tests inject a manual one.
	Clock Clock
}

// Clock is the target's time source for its timers.
type Clock interface {
	// AfterFunc calls f in its own goroutine after d (time.AfterFunc).
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of a Clock.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it was
	// running (time.Timer.Stop).
	Stop() bool
}

type systemClock struct{}

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (c Config) withDefaults() Config {
	if c.MaxReqSize == 0 {
		c.MaxReqSize = DefaultMaxReqSize
	}
	if c.MaxRspSize == 0 {
		c.MaxRspSize = DefaultMaxRspSize
	}
	if c.SQSize == 0 {
		c.SQSize = DefaultSQSize
	}
	if c.RQSize == 0 {
		c.RQSize = DefaultRQSize
	}
	if c.MaxRDMASize == 0 {
		c.MaxRDMASize = DefaultMaxRDMASize
	}
	if c.MaxDataLen == 0 {
		c.MaxDataLen = DefaultMaxDataLen
	}
	if c.MaxDataMemory == 0 {
		c.MaxDataMemory = max(DefaultMaxDataMemory, bufClass(c.MaxDataLen))
	}
	if c.MaxChannels == 0 {
		c.MaxChannels = DefaultMaxChannels
	}
	if c.MaxTotalChannels == 0 {
		c.MaxTotalChannels = DefaultMaxTotalChannels
	}
	if c.SRQSize == 0 {
		c.SRQSize = DefaultSRQSize
	}
	if c.RelativePort == 0 {
		c.RelativePort = 1
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.LoginTimeout == 0 {
		c.LoginTimeout = DefaultLoginTimeout
	}
	if c.LogoutTimeout == 0 {
		c.LogoutTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the tunables; the error names the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxReqSize < MinMaxReqSize || c.MaxReqSize > 1<<20:
		return fmt.Errorf("max_req_size: %d bytes out of range %d..%d", c.MaxReqSize, MinMaxReqSize, 1<<20)
	case c.MaxRspSize < MinMaxRspSize || c.MaxRspSize > MaxMaxRspSize:
		return fmt.Errorf("max_rsp_size: %d bytes out of range %d..%d", c.MaxRspSize, MinMaxRspSize, MaxMaxRspSize)
	case c.SQSize < 4 || c.SQSize > 65535:
		return fmt.Errorf("sq_size: %d work requests out of range 4..65535", c.SQSize)
	case c.RQSize < 1 || c.RQSize > 65535:
		return fmt.Errorf("rq_size: %d IUs out of range 1..65535", c.RQSize)
	case c.MaxRDMASize < 4096 || c.MaxRDMASize > 1<<30:
		return fmt.Errorf("max_rdma_size: %d bytes out of range 4096..%d", c.MaxRDMASize, 1<<30)
	case c.MaxDataLen < 4096 || c.MaxDataLen > 1<<30:
		return fmt.Errorf("max_data_len: %d bytes out of range 4096..%d", c.MaxDataLen, 1<<30)
	case c.MaxDataMemory < bufClass(c.MaxDataLen):
		return fmt.Errorf("max_data_memory: %d bytes is below one buffer of max_data_len (%d bytes)", c.MaxDataMemory, bufClass(c.MaxDataLen))
	case c.MaxChannels < 1:
		return fmt.Errorf("max_channels: %d must be at least 1", c.MaxChannels)
	case c.SRQSize < 4 || c.SRQSize > 65535:
		return fmt.Errorf("srq_size: %d receive buffers out of range 4..65535", c.SRQSize)
	case c.LoginTimeout < 0:
		return fmt.Errorf("login_timeout: %v must not be negative", c.LoginTimeout)
	case c.MaxTotalChannels < 1:
		return fmt.Errorf("max_total_channels: %d must be at least 1", c.MaxTotalChannels)
	}
	return nil
}
