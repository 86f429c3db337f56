package srp

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Opcode is the IU type code in byte 0 of every SRP IU (T10 SRP r16a;
// include/scsi/srp.h).
type Opcode uint8

// IU type codes.
const (
	OpLoginReq Opcode = 0x00 // SRP_LOGIN_REQ, initiator to target
	OpTskMgmt  Opcode = 0x01 // SRP_TSK_MGMT, initiator to target
	OpCmd      Opcode = 0x02 // SRP_CMD, initiator to target
	OpILogout  Opcode = 0x03 // SRP_I_LOGOUT, initiator to target
	OpCredRsp  Opcode = 0x41 // SRP_CRED_RSP, initiator to target
	OpAerRsp   Opcode = 0x42 // SRP_AER_RSP, initiator to target
	OpTLogout  Opcode = 0x80 // SRP_T_LOGOUT, target to initiator
	OpCredReq  Opcode = 0x81 // SRP_CRED_REQ, target to initiator
	OpAerReq   Opcode = 0x82 // SRP_AER_REQ, target to initiator
	OpLoginRsp Opcode = 0xc0 // SRP_LOGIN_RSP, target to initiator
	OpRsp      Opcode = 0xc1 // SRP_RSP, target to initiator
	OpLoginRej Opcode = 0xc2 // SRP_LOGIN_REJ, target to initiator
)

var opcodeNames = map[Opcode]string{
	OpLoginReq: "SRP_LOGIN_REQ",
	OpTskMgmt:  "SRP_TSK_MGMT",
	OpCmd:      "SRP_CMD",
	OpILogout:  "SRP_I_LOGOUT",
	OpCredRsp:  "SRP_CRED_RSP",
	OpAerRsp:   "SRP_AER_RSP",
	OpTLogout:  "SRP_T_LOGOUT",
	OpCredReq:  "SRP_CRED_REQ",
	OpAerReq:   "SRP_AER_REQ",
	OpLoginRsp: "SRP_LOGIN_RSP",
	OpRsp:      "SRP_RSP",
	OpLoginRej: "SRP_LOGIN_REJ",
}

// String returns the Linux name (SRP_CMD, ...) or "SRP_IU(0xNN)" for an
// unknown code.
func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("SRP_IU(%#02x)", uint8(o))
}

// Known reports whether o is one of the twelve SRP IU type codes.
func (o Opcode) Known() bool {
	_, ok := opcodeNames[o]
	return ok
}

// IU is an SRP information unit.
type IU interface {
	// Opcode returns the IU type code written in byte 0.
	Opcode() Opcode
	// Size returns the encoded length in bytes (fixed part plus any
	// additional CDB bytes, descriptors, response, sense or immediate
	// data).
	Size() int
	// AppendTo appends the encoded IU to b and returns the extended slice.
	// Appending into a buffer with enough capacity does not allocate.
	AppendTo(b []byte) ([]byte, error)
	// Marshal returns the encoded IU in a new slice.
	Marshal() ([]byte, error)
}

// Fixed IU sizes in bytes (include/scsi/srp.h; T10 SRP r16a).
const (
	LoginReqSize     = 64 // struct srp_login_req
	LoginReqRDMASize = 56 // struct srp_login_req_rdma
	LoginRspSize     = 52 // struct srp_login_rsp
	LoginRejSize     = 32 // struct srp_login_rej
	ILogoutSize      = 16 // struct srp_i_logout
	TLogoutSize      = 16 // struct srp_t_logout
	TskMgmtSize      = 48 // struct srp_tsk_mgmt
	CmdSize          = 48 // struct srp_cmd without add_data
	RspSize          = 36 // struct srp_rsp without data
	CredReqSize      = 16 // struct srp_cred_req
	CredRspSize      = 16 // struct srp_cred_rsp
	AerReqSize       = 36 // struct srp_aer_req without sense_data
	AerRspSize       = 16 // struct srp_aer_rsp
	DirectBufSize    = 16 // struct srp_direct_buf
	IndirectBufSize  = 20 // struct srp_indirect_buf without desc_list
	ImmBufSize       = 4  // struct srp_imm_buf
)

// PeekOpcode returns the opcode of the IU in b without decoding it. It fails
// only for an empty buffer.
func PeekOpcode(b []byte) (Opcode, error) {
	if len(b) < 1 {
		return 0, errShort("IU", "opcode", 0, 1, 0)
	}
	return Opcode(b[0]), nil
}

// Decode decodes one IU, choosing the type from the opcode in byte 0, and
// returns a pointer to the concrete type (*LoginRequest, *Cmd, ...). An
// SRP_CMD with immediate data is decoded with [DefaultImmDataOffset]; use
// (*Cmd).UnmarshalImm for another offset. Errors are *DecodeError.
func Decode(b []byte) (IU, error) {
	op, err := PeekOpcode(b)
	if err != nil {
		return nil, err
	}
	var iu interface {
		IU
		Unmarshal([]byte) error
	}
	switch op {
	case OpLoginReq:
		iu = new(LoginRequest)
	case OpTskMgmt:
		iu = new(TaskMgmt)
	case OpCmd:
		iu = new(Cmd)
	case OpILogout:
		iu = new(ILogout)
	case OpCredRsp:
		iu = new(CredRsp)
	case OpAerRsp:
		iu = new(AerRsp)
	case OpTLogout:
		iu = new(TLogout)
	case OpCredReq:
		iu = new(CredReq)
	case OpAerReq:
		iu = new(AerReq)
	case OpLoginRsp:
		iu = new(LoginResponse)
	case OpRsp:
		iu = new(Rsp)
	case OpLoginRej:
		iu = new(LoginReject)
	default:
		return nil, errInvalid("IU", "opcode", 0, "unknown IU type %#02x", uint8(op))
	}
	if err := iu.Unmarshal(b); err != nil {
		return nil, err
	}
	return iu, nil
}

// member is one member of a Linux struct: its name and byte offset.
type member struct {
	name string
	off  int
}

// Fixed parts of the IUs as the members of include/scsi/srp.h, in order.
var fixedMembers = map[Opcode][]member{
	OpLoginReq: {{"opcode", 0}, {"reserved1", 1}, {"tag", 8}, {"req_it_iu_len", 16}, {"reserved2", 20},
		{"req_buf_fmt", 24}, {"req_flags", 26}, {"reserved3", 27}, {"imm_data_offset", 28}, {"reserved4", 30},
		{"initiator_port_id", 32}, {"target_port_id", 48}},
	OpTskMgmt: {{"opcode", 0}, {"sol_not", 1}, {"reserved1", 2}, {"tag", 8}, {"reserved2", 16}, {"lun", 20},
		{"reserved3", 28}, {"tsk_mgmt_func", 30}, {"reserved4", 31}, {"task_tag", 32}, {"reserved5", 40}},
	OpCmd: {{"opcode", 0}, {"sol_not", 1}, {"reserved1", 2}, {"buf_fmt", 5}, {"data_out_desc_cnt", 6},
		{"data_in_desc_cnt", 7}, {"tag", 8}, {"reserved2", 16}, {"lun", 20}, {"reserved3", 28}, {"task_attr", 29},
		{"reserved4", 30}, {"add_cdb_len", 31}, {"cdb", 32}},
	OpILogout: {{"opcode", 0}, {"reserved", 1}, {"tag", 8}},
	OpCredRsp: {{"opcode", 0}, {"reserved", 1}, {"tag", 8}},
	OpAerRsp:  {{"opcode", 0}, {"reserved", 1}, {"tag", 8}},
	OpTLogout: {{"opcode", 0}, {"sol_not", 1}, {"reserved", 2}, {"reason", 4}, {"tag", 8}},
	OpCredReq: {{"opcode", 0}, {"sol_not", 1}, {"reserved", 2}, {"req_lim_delta", 4}, {"tag", 8}},
	OpAerReq: {{"opcode", 0}, {"sol_not", 1}, {"reserved", 2}, {"req_lim_delta", 4}, {"tag", 8}, {"reserved2", 16},
		{"lun", 20}, {"sense_data_len", 28}, {"reserved3", 32}},
	OpLoginRsp: {{"opcode", 0}, {"reserved1", 1}, {"req_lim_delta", 4}, {"tag", 8}, {"max_it_iu_len", 16},
		{"max_ti_iu_len", 20}, {"buf_fmt", 24}, {"rsp_flags", 26}, {"reserved2", 27}},
	OpRsp: {{"opcode", 0}, {"sol_not", 1}, {"reserved1", 2}, {"req_lim_delta", 4}, {"tag", 8}, {"reserved2", 16},
		{"flags", 18}, {"status", 19}, {"data_out_res_cnt", 20}, {"data_in_res_cnt", 24}, {"sense_data_len", 28},
		{"resp_data_len", 32}},
	OpLoginRej: {{"opcode", 0}, {"reserved1", 1}, {"reason", 4}, {"tag", 8}, {"reserved2", 16}, {"buf_fmt", 24},
		{"reserved3", 26}},
}

// loginReqRDMAMembers are the members of struct srp_login_req_rdma.
var loginReqRDMAMembers = []member{{"tag", 0}, {"req_buf_fmt", 8}, {"req_flags", 10}, {"opcode", 11},
	{"req_it_iu_len", 12}, {"initiator_port_id", 16}, {"target_port_id", 32}, {"imm_data_offset", 48},
	{"reserved", 50}}

// errFixedShort reports a buffer of have bytes that ends inside the
// size-byte fixed part of an IU laid out as ms: it names the first member
// cut short, passing over reserved members unless only those are missing.
func errFixedShort(iu string, ms []member, size, have int) error {
	first := -1
	for i, m := range ms {
		end := size
		if i+1 < len(ms) {
			end = ms[i+1].off
		}
		if end <= have {
			continue
		}
		if !strings.HasPrefix(m.name, "reserved") {
			return errShort(iu, m.name, m.off, size, have)
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		return errShort(iu, "IU", 0, size, have)
	}
	return errShort(iu, ms[first].name, ms[first].off, size, have)
}

// checkFixed checks length and opcode common to all decoders.
func checkFixed(b []byte, op Opcode, size int) error {
	if len(b) < size {
		return errFixedShort(op.String(), fixedMembers[op], size, len(b))
	}
	if Opcode(b[0]) != op {
		return errInvalid(op.String(), "opcode", 0, "got %#02x (%v), want %#02x", b[0], Opcode(b[0]), uint8(op))
	}
	return nil
}

// grow extends b by n zero bytes and returns the whole slice and the new
// n-byte region.
func grow(b []byte, n int) ([]byte, []byte) {
	b, p := growDirty(b, n)
	clear(p)
	return b, p
}

// growDirty is grow without the zeroing: the caller writes every byte of
// the n it gets (SRP_CMD's immediate data, copied over its whole length).
func growDirty(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, l+n+(l+n)/4)
		copy(nb, b)
		b = nb
	}
	b = b[:l+n]
	return b, b[l:]
}

var be = binary.BigEndian
