package srp

import "fmt"

// TMF is the SRP_TSK_MGMT tsk_mgmt_func code (T10 SRP r16a;
// SAM task management functions).
type TMF uint8

// Task management functions.
const (
	TMFAbortTask    TMF = 0x01 // SRP_TSK_ABORT_TASK
	TMFAbortTaskSet TMF = 0x02 // SRP_TSK_ABORT_TASK_SET
	TMFClearTaskSet TMF = 0x04 // SRP_TSK_CLEAR_TASK_SET
	TMFLUNReset     TMF = 0x08 // SRP_TSK_LUN_RESET
	TMFClearACA     TMF = 0x40 // SRP_TSK_CLEAR_ACA
)

// String returns the Linux name or "SRP_TSK(0xNN)".
func (t TMF) String() string {
	switch t {
	case TMFAbortTask:
		return "SRP_TSK_ABORT_TASK"
	case TMFAbortTaskSet:
		return "SRP_TSK_ABORT_TASK_SET"
	case TMFClearTaskSet:
		return "SRP_TSK_CLEAR_TASK_SET"
	case TMFLUNReset:
		return "SRP_TSK_LUN_RESET"
	case TMFClearACA:
		return "SRP_TSK_CLEAR_ACA"
	}
	return fmt.Sprintf("SRP_TSK(%#02x)", uint8(t))
}

// Name returns the SAM-5 name of the function (ABORT TASK, LOGICAL UNIT
// RESET, ...) or "TMF 0xNN".
func (t TMF) Name() string {
	switch t {
	case TMFAbortTask:
		return "ABORT TASK"
	case TMFAbortTaskSet:
		return "ABORT TASK SET"
	case TMFClearTaskSet:
		return "CLEAR TASK SET"
	case TMFLUNReset:
		return "LOGICAL UNIT RESET"
	case TMFClearACA:
		return "CLEAR ACA"
	}
	return fmt.Sprintf("TMF %#02x", uint8(t))
}

// TMF response codes carried in byte 3 of the 4-byte response data of the
// SRP_RSP answering an SRP_TSK_MGMT (T10 SRP r16a SRP_RSP response codes;
// Linux ib_srpt srpt_build_tskmgmt_rsp).
const (
	TMFRspComplete     uint8 = 0x00 // TASK MANAGEMENT FUNCTION COMPLETE
	TMFRspInvalidIU    uint8 = 0x02 // request fields invalid
	TMFRspNotSupported uint8 = 0x04 // TASK MANAGEMENT FUNCTION NOT SUPPORTED
	TMFRspFailed       uint8 = 0x05 // TASK MANAGEMENT FUNCTION FAILED
	// TMFRspIncorrectLUN is INCORRECT LOGICAL UNIT NUMBER (SAM-5 §7.1),
	// which a target passes through for a LUN it does not have.
	TMFRspIncorrectLUN uint8 = 0x09
)

// TMFRspName names a task management response code, e.g. "function
// complete", or "response 0xNN".
func TMFRspName(code uint8) string {
	switch code {
	case TMFRspComplete:
		return "function complete"
	case TMFRspInvalidIU:
		return "request fields invalid"
	case TMFRspNotSupported:
		return "function not supported"
	case TMFRspFailed:
		return "function failed"
	case TMFRspIncorrectLUN:
		return "incorrect logical unit number"
	}
	return fmt.Sprintf("response %#02x", code)
}

// TaskMgmt is SRP_TSK_MGMT (T10 SRP r16a; struct srp_tsk_mgmt, 48
// bytes).
type TaskMgmt struct {
	SolNot uint8  // sol_not
	Tag    uint64 // tag of this IU
	LUN    uint64 // lun, 8-byte SAM LUN as big-endian
	Func   TMF    // tsk_mgmt_func
	// TaskTag is the tag of the SRP_CMD to abort (task_tag, ABORT TASK
	// only).
	TaskTag uint64
}

// Opcode returns OpTskMgmt.
func (*TaskMgmt) Opcode() Opcode { return OpTskMgmt }

// Size returns TskMgmtSize.
func (*TaskMgmt) Size() int { return TskMgmtSize }

// AppendTo appends the 48-byte SRP_TSK_MGMT. It never fails.
func (t *TaskMgmt) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, TskMgmtSize)
	p[0] = byte(OpTskMgmt)
	p[1] = t.SolNot
	be.PutUint64(p[8:], t.Tag)
	be.PutUint64(p[20:], t.LUN)
	p[30] = byte(t.Func)
	be.PutUint64(p[32:], t.TaskTag)
	return b, nil
}

// Marshal returns the 48-byte SRP_TSK_MGMT.
func (t *TaskMgmt) Marshal() ([]byte, error) { return t.AppendTo(nil) }

// Unmarshal decodes an SRP_TSK_MGMT from the first 48 bytes of b. Any
// tsk_mgmt_func value is accepted; answering an unknown one is the target's
// business (TMFRspNotSupported).
func (t *TaskMgmt) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpTskMgmt, TskMgmtSize); err != nil {
		return err
	}
	*t = TaskMgmt{
		SolNot:  b[1],
		Tag:     be.Uint64(b[8:]),
		LUN:     be.Uint64(b[20:]),
		Func:    TMF(b[30]),
		TaskTag: be.Uint64(b[32:]),
	}
	return nil
}

// UnmarshalTaskMgmt decodes an SRP_TSK_MGMT.
func UnmarshalTaskMgmt(b []byte) (*TaskMgmt, error) {
	t := new(TaskMgmt)
	return t, t.Unmarshal(b)
}

// ILogout is SRP_I_LOGOUT (T10 SRP r16a; struct srp_i_logout, 16
// bytes).
type ILogout struct {
	Tag uint64 // tag
}

// Opcode returns OpILogout.
func (*ILogout) Opcode() Opcode { return OpILogout }

// Size returns ILogoutSize.
func (*ILogout) Size() int { return ILogoutSize }

// AppendTo appends the 16-byte SRP_I_LOGOUT. It never fails.
func (l *ILogout) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, ILogoutSize)
	p[0] = byte(OpILogout)
	be.PutUint64(p[8:], l.Tag)
	return b, nil
}

// Marshal returns the 16-byte SRP_I_LOGOUT.
func (l *ILogout) Marshal() ([]byte, error) { return l.AppendTo(nil) }

// Unmarshal decodes an SRP_I_LOGOUT from the first 16 bytes of b.
func (l *ILogout) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpILogout, ILogoutSize); err != nil {
		return err
	}
	l.Tag = be.Uint64(b[8:])
	return nil
}

// UnmarshalILogout decodes an SRP_I_LOGOUT.
func UnmarshalILogout(b []byte) (*ILogout, error) {
	l := new(ILogout)
	return l, l.Unmarshal(b)
}

// TLogoutReason is the SRP_T_LOGOUT reason code (T10 SRP r16a).
type TLogoutReason uint32

// Target logout reasons. 0x00000005 and 0x0000000a-0x0000ffff are reserved;
// 0x00010000-0xffffffff are vendor specific.
const (
	TLogoutNoReason            TLogoutReason = 0x0 // no reason specified
	TLogoutInactiveChannel     TLogoutReason = 0x1 // inactive RDMA channel (reclaiming channel resources)
	TLogoutInvalidIUType       TLogoutReason = 0x2 // invalid information unit type code received by SRP target port
	TLogoutUnexpectedResponse  TLogoutReason = 0x3 // SRP target port received a response with no outstanding request
	TLogoutMultiChannelAction  TLogoutReason = 0x4 // channel terminated by a multi-channel action on a new login
	TLogoutUnsupportedDataOut  TLogoutReason = 0x6 // unsupported format code for data-out buffer descriptor
	TLogoutUnsupportedDataIn   TLogoutReason = 0x7 // unsupported format code for data-in buffer descriptor
	TLogoutInvalidDataOutCount TLogoutReason = 0x8 // invalid count value in data-out buffer descriptor count
	TLogoutInvalidDataInCount  TLogoutReason = 0x9 // invalid count value in data-in buffer descriptor count
)

var tlogoutNames = map[TLogoutReason]string{
	TLogoutNoReason:            "no reason specified",
	TLogoutInactiveChannel:     "inactive RDMA channel",
	TLogoutInvalidIUType:       "invalid IU type code",
	TLogoutUnexpectedResponse:  "response with no outstanding request",
	TLogoutMultiChannelAction:  "multi-channel action",
	TLogoutUnsupportedDataOut:  "unsupported data-out buffer descriptor format",
	TLogoutUnsupportedDataIn:   "unsupported data-in buffer descriptor format",
	TLogoutInvalidDataOutCount: "invalid data-out buffer descriptor count",
	TLogoutInvalidDataInCount:  "invalid data-in buffer descriptor count",
}

// String describes the reason, or gives its hex value if not defined.
func (r TLogoutReason) String() string {
	if s, ok := tlogoutNames[r]; ok {
		return s
	}
	if r >= 0x10000 {
		return fmt.Sprintf("vendor specific (%#08x)", uint32(r))
	}
	return fmt.Sprintf("reserved (%#08x)", uint32(r))
}

// TLogout is SRP_T_LOGOUT (T10 SRP r16a; struct srp_t_logout, 16
// bytes).
type TLogout struct {
	SolNot uint8         // sol_not
	Reason TLogoutReason // reason
	Tag    uint64        // tag
}

// Opcode returns OpTLogout.
func (*TLogout) Opcode() Opcode { return OpTLogout }

// Size returns TLogoutSize.
func (*TLogout) Size() int { return TLogoutSize }

// AppendTo appends the 16-byte SRP_T_LOGOUT. It never fails.
func (l *TLogout) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, TLogoutSize)
	p[0] = byte(OpTLogout)
	p[1] = l.SolNot
	be.PutUint32(p[4:], uint32(l.Reason))
	be.PutUint64(p[8:], l.Tag)
	return b, nil
}

// Marshal returns the 16-byte SRP_T_LOGOUT.
func (l *TLogout) Marshal() ([]byte, error) { return l.AppendTo(nil) }

// Unmarshal decodes an SRP_T_LOGOUT from the first 16 bytes of b.
func (l *TLogout) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpTLogout, TLogoutSize); err != nil {
		return err
	}
	*l = TLogout{SolNot: b[1], Reason: TLogoutReason(be.Uint32(b[4:])), Tag: be.Uint64(b[8:])}
	return nil
}

// UnmarshalTLogout decodes an SRP_T_LOGOUT.
func UnmarshalTLogout(b []byte) (*TLogout, error) {
	l := new(TLogout)
	return l, l.Unmarshal(b)
}

// CredReq is SRP_CRED_REQ (T10 SRP r16a; struct srp_cred_req, 16
// bytes): the target grants ReqLimDelta more request credits.
type CredReq struct {
	SolNot      uint8  // sol_not
	ReqLimDelta uint32 // req_lim_delta, in IUs
	Tag         uint64 // tag
}

// Opcode returns OpCredReq.
func (*CredReq) Opcode() Opcode { return OpCredReq }

// Size returns CredReqSize.
func (*CredReq) Size() int { return CredReqSize }

// AppendTo appends the 16-byte SRP_CRED_REQ. It never fails.
func (c *CredReq) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, CredReqSize)
	p[0] = byte(OpCredReq)
	p[1] = c.SolNot
	be.PutUint32(p[4:], c.ReqLimDelta)
	be.PutUint64(p[8:], c.Tag)
	return b, nil
}

// Marshal returns the 16-byte SRP_CRED_REQ.
func (c *CredReq) Marshal() ([]byte, error) { return c.AppendTo(nil) }

// Unmarshal decodes an SRP_CRED_REQ from the first 16 bytes of b.
func (c *CredReq) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpCredReq, CredReqSize); err != nil {
		return err
	}
	*c = CredReq{SolNot: b[1], ReqLimDelta: be.Uint32(b[4:]), Tag: be.Uint64(b[8:])}
	return nil
}

// UnmarshalCredReq decodes an SRP_CRED_REQ.
func UnmarshalCredReq(b []byte) (*CredReq, error) {
	c := new(CredReq)
	return c, c.Unmarshal(b)
}

// CredRsp is SRP_CRED_RSP (T10 SRP r16a; struct srp_cred_rsp, 16
// bytes).
type CredRsp struct {
	Tag uint64 // tag, echoed from the SRP_CRED_REQ
}

// Opcode returns OpCredRsp.
func (*CredRsp) Opcode() Opcode { return OpCredRsp }

// Size returns CredRspSize.
func (*CredRsp) Size() int { return CredRspSize }

// AppendTo appends the 16-byte SRP_CRED_RSP. It never fails.
func (c *CredRsp) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, CredRspSize)
	p[0] = byte(OpCredRsp)
	be.PutUint64(p[8:], c.Tag)
	return b, nil
}

// Marshal returns the 16-byte SRP_CRED_RSP.
func (c *CredRsp) Marshal() ([]byte, error) { return c.AppendTo(nil) }

// Unmarshal decodes an SRP_CRED_RSP from the first 16 bytes of b.
func (c *CredRsp) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpCredRsp, CredRspSize); err != nil {
		return err
	}
	c.Tag = be.Uint64(b[8:])
	return nil
}

// UnmarshalCredRsp decodes an SRP_CRED_RSP.
func UnmarshalCredRsp(b []byte) (*CredRsp, error) {
	c := new(CredRsp)
	return c, c.Unmarshal(b)
}

// AerReq is SRP_AER_REQ (T10 SRP r16a; struct srp_aer_req, 36 bytes
// plus sense data): an asynchronous event with sense data for a LUN.
type AerReq struct {
	SolNot      uint8  // sol_not
	ReqLimDelta uint32 // req_lim_delta, in IUs
	Tag         uint64 // tag
	LUN         uint64 // lun
	// Sense is the sense data (sense_data, sense_data_len bytes). Decoded
	// values alias the input buffer.
	Sense []byte
}

// Opcode returns OpAerReq.
func (*AerReq) Opcode() Opcode { return OpAerReq }

// Size returns 36 + len(Sense).
func (a *AerReq) Size() int { return AerReqSize + len(a.Sense) }

// AppendTo appends the SRP_AER_REQ with its sense data.
func (a *AerReq) AppendTo(b []byte) ([]byte, error) {
	if uint64(len(a.Sense)) > maxIULen {
		return b, &EncodeError{"SRP_AER_REQ", "sense_data_len", "too long"}
	}
	b, p := grow(b, a.Size())
	p[0] = byte(OpAerReq)
	p[1] = a.SolNot
	be.PutUint32(p[4:], a.ReqLimDelta)
	be.PutUint64(p[8:], a.Tag)
	be.PutUint64(p[20:], a.LUN)
	be.PutUint32(p[28:], uint32(len(a.Sense)))
	copy(p[AerReqSize:], a.Sense)
	return b, nil
}

// Marshal returns the encoded SRP_AER_REQ.
func (a *AerReq) Marshal() ([]byte, error) { return a.AppendTo(nil) }

// Unmarshal decodes an SRP_AER_REQ; b must hold 36 + sense_data_len bytes.
func (a *AerReq) Unmarshal(b []byte) error {
	const iu = "SRP_AER_REQ"
	if err := checkFixed(b, OpAerReq, AerReqSize); err != nil {
		return err
	}
	n := uint64(be.Uint32(b[28:]))
	if n > uint64(len(b)-AerReqSize) {
		return errShort(iu, "sense_data_len", 28, clampInt(AerReqSize+n), len(b))
	}
	*a = AerReq{
		SolNot:      b[1],
		ReqLimDelta: be.Uint32(b[4:]),
		Tag:         be.Uint64(b[8:]),
		LUN:         be.Uint64(b[20:]),
	}
	if n > 0 {
		a.Sense = b[AerReqSize : AerReqSize+int(n) : AerReqSize+int(n)]
	}
	return nil
}

// UnmarshalAerReq decodes an SRP_AER_REQ.
func UnmarshalAerReq(b []byte) (*AerReq, error) {
	a := new(AerReq)
	return a, a.Unmarshal(b)
}

// AerRsp is SRP_AER_RSP (T10 SRP r16a; struct srp_aer_rsp, 16 bytes).
type AerRsp struct {
	Tag uint64 // tag, echoed from the SRP_AER_REQ
}

// Opcode returns OpAerRsp.
func (*AerRsp) Opcode() Opcode { return OpAerRsp }

// Size returns AerRspSize.
func (*AerRsp) Size() int { return AerRspSize }

// AppendTo appends the 16-byte SRP_AER_RSP. It never fails.
func (a *AerRsp) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, AerRspSize)
	p[0] = byte(OpAerRsp)
	be.PutUint64(p[8:], a.Tag)
	return b, nil
}

// Marshal returns the 16-byte SRP_AER_RSP.
func (a *AerRsp) Marshal() ([]byte, error) { return a.AppendTo(nil) }

// Unmarshal decodes an SRP_AER_RSP from the first 16 bytes of b.
func (a *AerRsp) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpAerRsp, AerRspSize); err != nil {
		return err
	}
	a.Tag = be.Uint64(b[8:])
	return nil
}

// UnmarshalAerRsp decodes an SRP_AER_RSP.
func UnmarshalAerRsp(b []byte) (*AerRsp, error) {
	a := new(AerRsp)
	return a, a.Unmarshal(b)
}

// maxIULen bounds encoded lengths carried in 32-bit length fields.
const maxIULen = 1<<32 - 1

// clampInt converts a byte count that may exceed int range for reporting.
func clampInt(n uint64) int {
	if n > 1<<62 {
		return 1 << 62
	}
	return int(n)
}
