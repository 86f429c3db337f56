package initiator

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// Linux ib_srp defaults (drivers/infiniband/ulp/srp/ib_srp.c module
// parameters and srp_create_target).
const (
	DefaultQueueSize      = 64   // add_target queue_size
	DefaultCmdSGEntries   = 12   // cmd_sg_entries
	MaxCmdSGEntries       = 255  // cmd_sg_entries upper bound
	DefaultMaxSect        = 1024 // max_sect, 512-byte sectors
	DefaultMaxImmData     = 8192 // max_imm_data, bytes
	DefaultReconnectDelay = 10 * time.Second
	DefaultFastIOFailTmo  = 15 * time.Second
	DefaultDevLossTmo     = 600 * time.Second
	// DefaultCommandTimeout matches the SCSI disk driver's 30 s.
	DefaultCommandTimeout = 30 * time.Second
	// DefaultTMFTimeout matches ib_srp's SRP_ABORT_TIMEOUT_MS (5 s).
	DefaultTMFTimeout = 5 * time.Second

	// ImmDataOffset is where immediate data starts in an SRP_CMD, in bytes:
	// 48-byte SRP_CMD + 16 bytes additional CDB room + 4-byte imm_buf
	// (Linux SRP_IMM_DATA_OFFSET).
	ImmDataOffset = 68
	// tmfReserve is the credit kept back for task management
	// (ib_srp SRP_TSK_MGMT_SQ_SIZE).
	tmfReserve = 1
	// rspSQSize is the send queue room ib_srp keeps for answers to target
	// requests (SRP_RSP_SQ_SIZE); can_queue leaves it out of queue_size.
	rspSQSize = 1
	// rspSlots is how many IUs answer target requests (CRED_RSP, AER_RSP)
	// at once here: a few more than ib_srp, so that a CRED_REQ and an
	// AER_REQ back to back are both answered.
	rspSlots = 4
	// maxQueueSize keeps every send IU slot index within the 16 bits the
	// tag gives it.
	maxQueueSize = 0xffff - tmfSlots - rspSlots
)

// IO classes (T10 SRP r16a §5.3.2; Linux SRP_REV10_IB_IO_CLASS and
// SRP_REV16A_IB_IO_CLASS). Rev. 10 targets put the port ID halves in the
// other order.
const (
	IOClassRev16A uint16 = 0x0100
	IOClassRev10  uint16 = 0xff00
)

// Options describe one target and how to log in to it. The fields follow
// Linux ib_srp's add_target parameters; zero values take ib_srp's defaults.
type Options struct {
	// IDExt and IOCGUID form the target port identifier (id_ext, ioc_guid).
	IDExt, IOCGUID uint64
	// Dest is the target's connection manager address, "host:port" or
	// "[v6]:port" (add_target dest=).
	Dest string
	// InitiatorExt is the first half of the initiator port identifier
	// (initiator_ext).
	InitiatorExt uint64
	// InitiatorGUID is the second half of the initiator port identifier (the
	// port GUID in ib_srp). 0 derives a stable value from the host name.
	InitiatorGUID uint64
	// JoinNexus logs channel 0 in with multichannel action MULTI too, so
	// the login keeps the channels other sessions of the same initiator
	// port hold on the target; they share one I_T nexus, its unit
	// attentions and reservations (T10 SRP r16a, SRP_LOGIN_REQ
	// MULTI-CHANNEL ACTION). false sends SINGLE on channel 0, as Linux
	// ib_srp always does (srp_connect_target): the target logs out every
	// other channel of the I_T nexus, stale ones of an earlier session
	// included. A session the target logged out that way (SRP_T_LOGOUT
	// multi-channel action) reconnects with MULTI whatever JoinNexus says.
	JoinNexus bool
	// IOClass selects the port identifier layout (io_class); 0 means rev. 16a.
	IOClass uint16
	// QueueSize is the number of IUs per channel (ib_srp target->queue_size:
	// add_target queue_size + 2); the number of commands a channel may have
	// outstanding is min(req_lim-1, QueueSize-2), as ib_srp computes
	// can_queue.
	QueueSize int
	// MaxITIUSize caps the requested initiator-to-target IU length, bytes
	// (max_it_iu_size); 0 means no cap.
	MaxITIUSize int
	// ChCount is the number of RDMA channels (ch_count); 0 means 1.
	// ParseTarget and FromTargetOptions set AutoChCount when the add_target
	// string has no ch_count.
	ChCount int
	// CmdSGEntries is the most descriptors an SRP_CMD carries inline
	// (cmd_sg_entries, 1..255).
	CmdSGEntries int
	// MaxSect is the largest transfer per command in 512-byte sectors
	// (max_sect).
	MaxSect int
	// NoImmData disables immediate data (ib_srp use_imm_data=0).
	NoImmData bool
	// MaxImmData is the largest immediate data payload requested, bytes
	// (max_imm_data).
	MaxImmData int
	// Transport names the RDMA provider the program wires ("iwarp" or
	// "verbs"); the library itself only uses the injected rdma.Device.
	Transport string
	// ReconnectDelay is the wait between reconnect attempts after a channel
	// is lost (reconnect_delay); negative disables reconnecting.
	ReconnectDelay time.Duration
	// FastIOFailTmo is how long commands wait for a reconnect before they
	// fail with ErrFastIOFail (fast_io_fail_tmo); negative means never fail
	// fast (wait until DevLossTmo).
	FastIOFailTmo time.Duration
	// DevLossTmo is how long the session keeps reconnecting before it gives
	// up with ErrDevLoss (dev_loss_tmo); negative means forever.
	DevLossTmo time.Duration
	// CommandTimeout bounds each command; on expiry the command is aborted
	// with ABORT TASK.
	CommandTimeout time.Duration
	// TMFTimeout bounds each task management function (ABORT TASK, LUN
	// RESET).
	TMFTimeout time.Duration
	// Logger receives channel events; nil discards.
	Logger *slog.Logger
	// Clock runs the timers above; nil means the system clock.
	Clock Clock
}

// withDefaults returns o with zero fields replaced by ib_srp's defaults.
func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.ChCount == 0 {
		o.ChCount = 1
	}
	if o.CmdSGEntries == 0 {
		o.CmdSGEntries = DefaultCmdSGEntries
	}
	if o.MaxSect == 0 {
		o.MaxSect = DefaultMaxSect
	}
	if o.MaxImmData == 0 {
		o.MaxImmData = DefaultMaxImmData
	}
	if o.IOClass == 0 {
		o.IOClass = IOClassRev16A
	}
	if o.InitiatorGUID == 0 {
		h := fnv.New64a()
		name, _ := os.Hostname()
		h.Write([]byte("gosrp initiator " + name))
		o.InitiatorGUID = h.Sum64()
	}
	if o.ReconnectDelay == 0 {
		o.ReconnectDelay = DefaultReconnectDelay
	}
	if o.FastIOFailTmo == 0 {
		o.FastIOFailTmo = DefaultFastIOFailTmo
	}
	if o.DevLossTmo == 0 {
		o.DevLossTmo = DefaultDevLossTmo
	}
	if o.CommandTimeout == 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.TMFTimeout == 0 {
		o.TMFTimeout = DefaultTMFTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Dest == "":
		return fmt.Errorf("srp initiator: no dest (target address) given")
	case o.QueueSize < 4 || o.QueueSize > maxQueueSize:
		return fmt.Errorf("srp initiator: queue_size %d out of range 4..%d", o.QueueSize, maxQueueSize)
	case o.CmdSGEntries < 1 || o.CmdSGEntries > MaxCmdSGEntries:
		return fmt.Errorf("srp initiator: cmd_sg_entries %d out of range 1..255", o.CmdSGEntries)
	case o.ChCount < 1 || o.ChCount > 255:
		return fmt.Errorf("srp initiator: ch_count %d out of range 1..255", o.ChCount)
	case o.MaxSect < 1:
		return fmt.Errorf("srp initiator: max_sect %d must be positive", o.MaxSect)
	case o.MaxITIUSize != 0 && o.MaxITIUSize < 64:
		return fmt.Errorf("srp initiator: max_it_iu_size %d below the 64-byte SRP_CMD with one descriptor", o.MaxITIUSize)
	}
	return nil
}

// loginMulti reports whether channel idx logs in with multichannel action
// MULTI: every channel after the first, and the first too with JoinNexus.
func (o Options) loginMulti(idx int) bool { return idx > 0 || o.JoinNexus }

// ReqITIULen is the initiator-to-target IU length the login requests, bytes:
// max(48 + 16 + 20 + 16*cmd_sg_entries, 68 + max_imm_data) when immediate
// data is used, capped by MaxITIUSize (Linux ib_srp srp_max_it_iu_len). With
// the defaults it is 8260.
func (o Options) ReqITIULen() int {
	o = o.withDefaults()
	n := 48 + 16 + 20 + 16*o.CmdSGEntries // SRP_CMD, max add. CDB, indirect header, descriptors
	if !o.NoImmData && ImmDataOffset+o.MaxImmData > n {
		n = ImmDataOffset + o.MaxImmData
	}
	if o.MaxITIUSize > 0 && n > o.MaxITIUSize {
		n = o.MaxITIUSize
	}
	return n
}

// PortIDs returns the 16-byte initiator and target port identifiers the
// login carries (T10 SRP r16a §5.2; Linux srp_send_req): rev. 16a puts the
// extension first, rev. 10 (IOClass 0xff00) the GUID first.
func (o Options) PortIDs() (initiator, target [16]byte) {
	o = o.withDefaults()
	put := func(b []byte, v uint64) {
		for i := 0; i < 8; i++ {
			b[i] = byte(v >> (56 - 8*i))
		}
	}
	if o.IOClass == IOClassRev10 {
		put(initiator[:8], o.InitiatorGUID)
		put(initiator[8:], o.InitiatorExt)
		put(target[:8], o.IOCGUID)
		put(target[8:], o.IDExt)
	} else {
		put(initiator[:8], o.InitiatorExt)
		put(initiator[8:], o.InitiatorGUID)
		put(target[:8], o.IDExt)
		put(target[8:], o.IOCGUID)
	}
	return
}

// AutoChCount is the channel count an add_target string without ch_count
// gets: min(4, number of CPUs). Linux ib_srp (srp_create_target) takes
// min(4 * online NUMA nodes, the HCA's completion vectors), capped by the
// online CPUs; a Go program has no completion vectors to spread over, one
// node is assumed, and soft-iWARP (siw) reports one completion vector per
// CPU, so on such a host both give min(4, CPUs).
func AutoChCount() int { return min(4, max(runtime.NumCPU(), 1)) }

// ibCMKeys are the add_target keys of the InfiniBand CM path.
var ibCMKeys = []string{"dgid", "pkey", "service_id"}

// refuseIBCM reports the InfiniBand CM keys among given, which gosrp cannot
// use: it connects through RDMA/CM only (dest=). transport is the
// add_target transport= value.
func refuseIBCM(given []string, transport string) error {
	if len(given) == 0 {
		return nil
	}
	keys := strings.Join(given, ", ")
	if t := strings.ToLower(transport); t == "" || t == "iwarp" {
		return fmt.Errorf("srp initiator: %s: InfiniBand CM addressing, which iWARP has no use for: iWARP/RDMA-CM addressing needs dest=IP:port (the target's address, as srptd prints it in login_info)", keys)
	}
	return fmt.Errorf("srp initiator: %s: the InfiniBand CM path is not supported; gosrp connects through RDMA/CM, which needs dest=IP:port (the target's IPoIB, RoCE or iWARP address)", keys)
}

// FromTargetOptions converts a parsed add_target string (package srp) to
// Options. Only the RDMA/CM path (dest=) is supported: the InfiniBand CM
// keys (dgid, pkey, service_id) are refused, with or without dest. As in
// ib_srp, queue_size=N sets can_queue N and a channel of N+2 IUs (one for
// task management, one for answers to target requests), and a string
// without ch_count gets AutoChCount channels.
func FromTargetOptions(t *srp.TargetOptions) (Options, error) {
	var given []string
	for _, k := range ibCMKeys {
		if t.Has(k) {
			given = append(given, k)
		}
	}
	if err := refuseIBCM(given, t.Transport); err != nil {
		return Options{}, err
	}
	if !t.Has("dest") {
		return Options{}, fmt.Errorf("srp initiator: no dest: give dest=IP:port (RDMA/CM)")
	}
	o := Options{
		IDExt: t.IDExt, IOCGUID: t.IOCGUID, Dest: t.Dest.String(), InitiatorExt: t.InitiatorExt,
		IOClass: t.IOClass, MaxITIUSize: t.MaxITIUSize, ChCount: t.ChCount, CmdSGEntries: t.CmdSGEntries,
		MaxSect: t.MaxSect, Transport: t.Transport,
	}
	if t.Has("queue_size") {
		// Checked here, in the string's terms: validate would name the
		// channel's size, two more than the queue_size given.
		const extra = tmfReserve + rspSQSize
		if q := t.QueueSize + extra; q < 4 || q > maxQueueSize {
			return Options{}, fmt.Errorf("srp initiator: queue_size %d out of range %d..%d", t.QueueSize, 4-extra, maxQueueSize-extra)
		}
		o.QueueSize = t.QueueSize + extra
	}
	if !t.Has("ch_count") {
		o.ChCount = AutoChCount()
	}
	return o, nil
}

// ParseTarget parses an add_target string (srp.ParseTargetOptions), e.g.
// "id_ext=0002c903000e8acc,ioc_guid=0002c903000e8acc,dest=192.0.2.1:5555",
// into Options (see FromTargetOptions). InfiniBand CM keys (dgid, pkey,
// service_id) are refused before anything else, so that an incomplete set
// of them is not reported as a missing key.
func ParseTarget(s string) (Options, error) {
	var given []string
	transport := ""
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		k, v, _ := strings.Cut(tok, "=")
		if k == "transport" {
			transport = v
		}
		if slices.Contains(ibCMKeys, k) && !slices.Contains(given, k) {
			given = append(given, k)
		}
	}
	if err := refuseIBCM(given, transport); err != nil {
		return Options{}, err
	}
	t, err := srp.ParseTargetOptions(s)
	if err != nil {
		return Options{}, err
	}
	return FromTargetOptions(t)
}
