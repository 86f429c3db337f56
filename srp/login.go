package srp

import "fmt"

// BufFormats is the 16-bit supported-buffer-format mask of SRP_LOGIN_REQ
// req_buf_fmt, SRP_LOGIN_RSP buf_fmt and SRP_LOGIN_REJ buf_fmt (T10 SRP r16a;
// include/scsi/srp.h SRP_BUF_FORMAT_*).
type BufFormats uint16

// Supported buffer formats.
const (
	BufFmtDirect   BufFormats = 0x0002 // SRP_BUF_FORMAT_DIRECT: direct data buffer descriptors
	BufFmtIndirect BufFormats = 0x0004 // SRP_BUF_FORMAT_INDIRECT: indirect data buffer descriptors
)

// LoginReqFlags is SRP_LOGIN_REQ req_flags (T10 SRP r16a;
// SRP-2 IMMED_REQUESTED).
type LoginReqFlags uint8

// Login request flags. The low two bits are the multi-channel action.
const (
	MultiChanSingle   LoginReqFlags = 0x00 // SRP_MULTICHAN_SINGLE: terminate other channels of this I_T nexus
	MultiChanMulti    LoginReqFlags = 0x01 // SRP_MULTICHAN_MULTI: keep other channels
	MultiChanMask     LoginReqFlags = 0x03 // mask of the multi-channel action
	LoginLOSOLNT      LoginReqFlags = 0x10 // solicited notification of SRP_T_LOGOUT
	LoginCRSOLNT      LoginReqFlags = 0x20 // solicited notification of SRP_CRED_REQ
	LoginAESOLNT      LoginReqFlags = 0x40 // solicited notification of SRP_AER_REQ
	LoginImmRequested LoginReqFlags = 0x80 // SRP_IMMED_REQUESTED (SRP-2): initiator wants to send immediate data
)

// LoginRspFlags is SRP_LOGIN_RSP rsp_flags (T10 SRP r16a;
// SRP-2 IMMED_SUPP).
type LoginRspFlags uint8

// Login response flags. The low two bits are the multi-channel result.
const (
	LoginRspNoChan     LoginRspFlags = 0x00 // SRP_LOGIN_RSP_MULTICHAN_NO_CHAN: no existing channel
	LoginRspTerminated LoginRspFlags = 0x01 // SRP_LOGIN_RSP_MULTICHAN_TERMINATED: existing channels terminated
	LoginRspMaintained LoginRspFlags = 0x02 // SRP_LOGIN_RSP_MULTICHAN_MAINTAINED: existing channels kept
	LoginRspImmSupp    LoginRspFlags = 0x80 // SRP_LOGIN_RSP_IMMED_SUPP (SRP-2): target accepts immediate data
)

// DefaultImmDataOffset is the immediate-data offset Linux ib_srp requests at
// login and uses in every SRP_CMD: sizeof(struct srp_cmd) + 16 bytes of
// maximum additional CDB + sizeof(struct srp_imm_buf) = 68 (ib_srp
// SRP_IMM_DATA_OFFSET).
const DefaultImmDataOffset = CmdSize + 16 + ImmBufSize

// LoginRequest is SRP_LOGIN_REQ (T10 SRP r16a; struct srp_login_req,
// 64 bytes).
type LoginRequest struct {
	Tag uint64 // tag
	// ReqITIULen is the largest initiator-to-target IU the initiator will
	// send, in bytes (req_it_iu_len). ib_srp sends 8260 by default.
	ReqITIULen uint32
	ReqBufFmt  BufFormats    // req_buf_fmt
	ReqFlags   LoginReqFlags // req_flags
	// ImmDataOffset is the byte offset of immediate data from the start of
	// each SRP_CMD (imm_data_offset, SRP-2); meaningful with
	// LoginImmRequested.
	ImmDataOffset   uint16
	InitiatorPortID PortID // initiator_port_id
	TargetPortID    PortID // target_port_id
}

// Opcode returns OpLoginReq.
func (*LoginRequest) Opcode() Opcode { return OpLoginReq }

// Size returns LoginReqSize.
func (*LoginRequest) Size() int { return LoginReqSize }

// AppendTo appends the 64-byte SRP_LOGIN_REQ. It never fails.
func (r *LoginRequest) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, LoginReqSize)
	p[0] = byte(OpLoginReq)
	be.PutUint64(p[8:], r.Tag)
	be.PutUint32(p[16:], r.ReqITIULen)
	be.PutUint16(p[24:], uint16(r.ReqBufFmt))
	p[26] = byte(r.ReqFlags)
	be.PutUint16(p[28:], r.ImmDataOffset)
	copy(p[32:48], r.InitiatorPortID[:])
	copy(p[48:64], r.TargetPortID[:])
	return b, nil
}

// Marshal returns the 64-byte SRP_LOGIN_REQ.
func (r *LoginRequest) Marshal() ([]byte, error) { return r.AppendTo(nil) }

// Unmarshal decodes an SRP_LOGIN_REQ from the first 64 bytes of b.
func (r *LoginRequest) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpLoginReq, LoginReqSize); err != nil {
		return err
	}
	*r = LoginRequest{
		Tag:           be.Uint64(b[8:]),
		ReqITIULen:    be.Uint32(b[16:]),
		ReqBufFmt:     BufFormats(be.Uint16(b[24:])),
		ReqFlags:      LoginReqFlags(b[26]),
		ImmDataOffset: be.Uint16(b[28:]),
	}
	copy(r.InitiatorPortID[:], b[32:48])
	copy(r.TargetPortID[:], b[48:64])
	return nil
}

// UnmarshalLoginRequest decodes an SRP_LOGIN_REQ.
func UnmarshalLoginRequest(b []byte) (*LoginRequest, error) {
	r := new(LoginRequest)
	return r, r.Unmarshal(b)
}

// LoginRequestRDMA is the login request in the 56-byte form Linux carries as
// RDMA/CM connection private data (struct srp_login_req_rdma: the same
// fields with the reserved bytes dropped and the opcode at byte 11). Convert
// with LoginRequest(r) and LoginRequestRDMA(r).
type LoginRequestRDMA LoginRequest

// Opcode returns OpLoginReq.
func (*LoginRequestRDMA) Opcode() Opcode { return OpLoginReq }

// Size returns LoginReqRDMASize.
func (*LoginRequestRDMA) Size() int { return LoginReqRDMASize }

// AppendTo appends the 56-byte srp_login_req_rdma. It never fails.
func (r *LoginRequestRDMA) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, LoginReqRDMASize)
	be.PutUint64(p[0:], r.Tag)
	be.PutUint16(p[8:], uint16(r.ReqBufFmt))
	p[10] = byte(r.ReqFlags)
	p[11] = byte(OpLoginReq)
	be.PutUint32(p[12:], r.ReqITIULen)
	copy(p[16:32], r.InitiatorPortID[:])
	copy(p[32:48], r.TargetPortID[:])
	be.PutUint16(p[48:], r.ImmDataOffset)
	return b, nil
}

// Marshal returns the 56-byte srp_login_req_rdma.
func (r *LoginRequestRDMA) Marshal() ([]byte, error) { return r.AppendTo(nil) }

// Unmarshal decodes srp_login_req_rdma from the first 56 bytes of b (ib_srpt
// requires at least 56 bytes of private data; more are ignored). The opcode
// at byte 11 must be SRP_LOGIN_REQ (0).
func (r *LoginRequestRDMA) Unmarshal(b []byte) error {
	const iu = "srp_login_req_rdma"
	if len(b) < LoginReqRDMASize {
		return errFixedShort(iu, loginReqRDMAMembers, LoginReqRDMASize, len(b))
	}
	if b[11] != byte(OpLoginReq) {
		return errInvalid(iu, "opcode", 11, "got %#02x, want 0x00 (SRP_LOGIN_REQ)", b[11])
	}
	*r = LoginRequestRDMA{
		Tag:           be.Uint64(b[0:]),
		ReqBufFmt:     BufFormats(be.Uint16(b[8:])),
		ReqFlags:      LoginReqFlags(b[10]),
		ReqITIULen:    be.Uint32(b[12:]),
		ImmDataOffset: be.Uint16(b[48:]),
	}
	copy(r.InitiatorPortID[:], b[16:32])
	copy(r.TargetPortID[:], b[32:48])
	return nil
}

// UnmarshalLoginRequestRDMA decodes the 56-byte RDMA/CM login form and
// returns it as a LoginRequest.
func UnmarshalLoginRequestRDMA(b []byte) (*LoginRequest, error) {
	var r LoginRequestRDMA
	if err := r.Unmarshal(b); err != nil {
		return nil, err
	}
	lr := LoginRequest(r)
	return &lr, nil
}

// LoginResponse is SRP_LOGIN_RSP (T10 SRP r16a; struct srp_login_rsp,
// 52 bytes).
type LoginResponse struct {
	// ReqLimDelta is the initial request limit in IUs (req_lim_delta).
	ReqLimDelta uint32
	Tag         uint64 // tag, echoed from the request
	// MaxITIULen is the largest initiator-to-target IU the target accepts,
	// in bytes (max_it_iu_len; ib_srpt: srp_max_req_size).
	MaxITIULen uint32
	// MaxTIIULen is the largest target-to-initiator IU the target sends, in
	// bytes (max_ti_iu_len).
	MaxTIIULen uint32
	BufFmt     BufFormats    // buf_fmt: formats the target supports
	RspFlags   LoginRspFlags // rsp_flags
}

// Opcode returns OpLoginRsp.
func (*LoginResponse) Opcode() Opcode { return OpLoginRsp }

// Size returns LoginRspSize.
func (*LoginResponse) Size() int { return LoginRspSize }

// AppendTo appends the 52-byte SRP_LOGIN_RSP. It never fails.
func (r *LoginResponse) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, LoginRspSize)
	p[0] = byte(OpLoginRsp)
	be.PutUint32(p[4:], r.ReqLimDelta)
	be.PutUint64(p[8:], r.Tag)
	be.PutUint32(p[16:], r.MaxITIULen)
	be.PutUint32(p[20:], r.MaxTIIULen)
	be.PutUint16(p[24:], uint16(r.BufFmt))
	p[26] = byte(r.RspFlags)
	return b, nil
}

// Marshal returns the 52-byte SRP_LOGIN_RSP.
func (r *LoginResponse) Marshal() ([]byte, error) { return r.AppendTo(nil) }

// Unmarshal decodes an SRP_LOGIN_RSP from the first 52 bytes of b.
func (r *LoginResponse) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpLoginRsp, LoginRspSize); err != nil {
		return err
	}
	*r = LoginResponse{
		ReqLimDelta: be.Uint32(b[4:]),
		Tag:         be.Uint64(b[8:]),
		MaxITIULen:  be.Uint32(b[16:]),
		MaxTIIULen:  be.Uint32(b[20:]),
		BufFmt:      BufFormats(be.Uint16(b[24:])),
		RspFlags:    LoginRspFlags(b[26]),
	}
	return nil
}

// UnmarshalLoginResponse decodes an SRP_LOGIN_RSP.
func UnmarshalLoginResponse(b []byte) (*LoginResponse, error) {
	r := new(LoginResponse)
	return r, r.Unmarshal(b)
}

// RejectReason is the SRP_LOGIN_REJ reason code (T10 SRP r16a; enum srp_login_rej_reason).
type RejectReason uint32

// Login reject reasons.
const (
	RejUnableEstablishChannel  RejectReason = 0x00010000 // unable to establish RDMA channel, no reason specified
	RejInsufficientResources   RejectReason = 0x00010001 // insufficient RDMA channel resources
	RejReqITIULenTooLarge      RejectReason = 0x00010002 // requested maximum initiator to target IU length value too large
	RejUnableAssociateChannel  RejectReason = 0x00010003 // unable to associate RDMA channel with specified I_T nexus
	RejUnsupportedDescFmt      RejectReason = 0x00010004 // one or more requested data buffer descriptor formats are not supported
	RejMultiChannelUnsupported RejectReason = 0x00010005 // SRP target port does not support multiple RDMA channels per I_T nexus
	RejChannelLimitReached     RejectReason = 0x00010006 // RDMA channel limit reached for this initiator
)

var rejectNames = map[RejectReason]string{
	RejUnableEstablishChannel:  "SRP_LOGIN_REJ_UNABLE_ESTABLISH_CHANNEL",
	RejInsufficientResources:   "SRP_LOGIN_REJ_INSUFFICIENT_RESOURCES",
	RejReqITIULenTooLarge:      "SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE",
	RejUnableAssociateChannel:  "SRP_LOGIN_REJ_UNABLE_ASSOCIATE_CHANNEL",
	RejUnsupportedDescFmt:      "SRP_LOGIN_REJ_UNSUPPORTED_DESCRIPTOR_FMT",
	RejMultiChannelUnsupported: "SRP_LOGIN_REJ_MULTI_CHANNEL_UNSUPPORTED",
	RejChannelLimitReached:     "SRP_LOGIN_REJ_CHANNEL_LIMIT_REACHED",
}

// String returns the Linux enum name, or the hex value if unknown.
func (r RejectReason) String() string {
	if s, ok := rejectNames[r]; ok {
		return s
	}
	return fmt.Sprintf("SRP_LOGIN_REJ_REASON(%#08x)", uint32(r))
}

// LoginReject is SRP_LOGIN_REJ (T10 SRP r16a; struct srp_login_rej,
// 32 bytes).
type LoginReject struct {
	Reason RejectReason // reason
	Tag    uint64       // tag, echoed from the request
	BufFmt BufFormats   // buf_fmt: formats the target supports
}

// Opcode returns OpLoginRej.
func (*LoginReject) Opcode() Opcode { return OpLoginRej }

// Size returns LoginRejSize.
func (*LoginReject) Size() int { return LoginRejSize }

// AppendTo appends the 32-byte SRP_LOGIN_REJ. It never fails.
func (r *LoginReject) AppendTo(b []byte) ([]byte, error) {
	b, p := grow(b, LoginRejSize)
	p[0] = byte(OpLoginRej)
	be.PutUint32(p[4:], uint32(r.Reason))
	be.PutUint64(p[8:], r.Tag)
	be.PutUint16(p[24:], uint16(r.BufFmt))
	return b, nil
}

// Marshal returns the 32-byte SRP_LOGIN_REJ.
func (r *LoginReject) Marshal() ([]byte, error) { return r.AppendTo(nil) }

// Unmarshal decodes an SRP_LOGIN_REJ from the first 32 bytes of b.
func (r *LoginReject) Unmarshal(b []byte) error {
	if err := checkFixed(b, OpLoginRej, LoginRejSize); err != nil {
		return err
	}
	*r = LoginReject{
		Reason: RejectReason(be.Uint32(b[4:])),
		Tag:    be.Uint64(b[8:]),
		BufFmt: BufFormats(be.Uint16(b[24:])),
	}
	return nil
}

// UnmarshalLoginReject decodes an SRP_LOGIN_REJ.
func UnmarshalLoginReject(b []byte) (*LoginReject, error) {
	r := new(LoginReject)
	return r, r.Unmarshal(b)
}
