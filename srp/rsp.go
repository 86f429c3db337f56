package srp

// RspFlags is SRP_RSP flags (T10 SRP r16a).
type RspFlags uint8

// SRP_RSP flags.
const (
	RspValid     RspFlags = 0x01 // SRP_RSP_FLAG_RSPVALID: response data present
	SnsValid     RspFlags = 0x02 // SRP_RSP_FLAG_SNSVALID: sense data present
	DataOutOver  RspFlags = 0x04 // SRP_RSP_FLAG_DOOVER: data_out_res_cnt is an overflow
	DataOutUnder RspFlags = 0x08 // SRP_RSP_FLAG_DOUNDER: data_out_res_cnt is an underflow
	DataInOver   RspFlags = 0x10 // SRP_RSP_FLAG_DIOVER: data_in_res_cnt is an overflow
	DataInUnder  RspFlags = 0x20 // SRP_RSP_FLAG_DIUNDER: data_in_res_cnt is an underflow
)

// Rsp is SRP_RSP (T10 SRP r16a; struct srp_rsp, 36 bytes, then
// resp_data_len bytes of response data, then sense_data_len bytes of sense
// data).
//
// The encoder writes Flags verbatim and the lengths of RespData and Sense;
// set RspValid/SnsValid to match. The decoder honours both length fields
// whatever the flags say (as Linux ib_srp does when it locates the sense data
// after the response data).
type Rsp struct {
	SolNot      uint8    // sol_not
	ReqLimDelta uint32   // req_lim_delta, in IUs
	Tag         uint64   // tag, echoed from the request
	Flags       RspFlags // flags
	Status      uint8    // status: SCSI status byte
	// DataOutResCnt and DataInResCnt are residual counts in bytes
	// (data_out_res_cnt, data_in_res_cnt), meaningful with the
	// over/underflow flags.
	DataOutResCnt uint32
	DataInResCnt  uint32
	// RespData is the response data (4 bytes for a TMF response: code in
	// byte 3). Decoded values alias the input buffer.
	RespData []byte
	// Sense is the SCSI sense data. Decoded values alias the input buffer.
	Sense []byte
}

// Opcode returns OpRsp.
func (*Rsp) Opcode() Opcode { return OpRsp }

// Size returns 36 + len(RespData) + len(Sense).
func (r *Rsp) Size() int { return RspSize + len(r.RespData) + len(r.Sense) }

// AppendTo appends the SRP_RSP. It fails only if a length exceeds 32 bits.
// Appending into a buffer with room does not allocate.
func (r *Rsp) AppendTo(b []byte) ([]byte, error) {
	if uint64(len(r.RespData)) > maxIULen {
		return b, &EncodeError{"SRP_RSP", "resp_data_len", "too long"}
	}
	if uint64(len(r.Sense)) > maxIULen {
		return b, &EncodeError{"SRP_RSP", "sense_data_len", "too long"}
	}
	b, p := grow(b, r.Size())
	p[0] = byte(OpRsp)
	p[1] = r.SolNot
	be.PutUint32(p[4:], r.ReqLimDelta)
	be.PutUint64(p[8:], r.Tag)
	p[18] = byte(r.Flags)
	p[19] = r.Status
	be.PutUint32(p[20:], r.DataOutResCnt)
	be.PutUint32(p[24:], r.DataInResCnt)
	be.PutUint32(p[28:], uint32(len(r.Sense)))
	be.PutUint32(p[32:], uint32(len(r.RespData)))
	n := copy(p[RspSize:], r.RespData)
	copy(p[RspSize+n:], r.Sense)
	return b, nil
}

// Marshal returns the encoded SRP_RSP.
func (r *Rsp) Marshal() ([]byte, error) { return r.AppendTo(nil) }

// Unmarshal decodes an SRP_RSP; b must hold 36 + resp_data_len +
// sense_data_len bytes. RespData and Sense alias b.
func (r *Rsp) Unmarshal(b []byte) error {
	const iu = "SRP_RSP"
	if err := checkFixed(b, OpRsp, RspSize); err != nil {
		return err
	}
	sn := uint64(be.Uint32(b[28:]))
	rn := uint64(be.Uint32(b[32:]))
	avail := uint64(len(b) - RspSize)
	if rn > avail {
		return errShort(iu, "resp_data_len", 32, clampInt(RspSize+rn), len(b))
	}
	if sn > avail-rn {
		return errShort(iu, "sense_data_len", 28, clampInt(RspSize+rn+sn), len(b))
	}
	rs, ss := RspSize+int(rn), RspSize+int(rn)+int(sn)
	*r = Rsp{
		SolNot:        b[1],
		ReqLimDelta:   be.Uint32(b[4:]),
		Tag:           be.Uint64(b[8:]),
		Flags:         RspFlags(b[18]),
		Status:        b[19],
		DataOutResCnt: be.Uint32(b[20:]),
		DataInResCnt:  be.Uint32(b[24:]),
	}
	if rn > 0 {
		r.RespData = b[RspSize:rs:rs]
	}
	if sn > 0 {
		r.Sense = b[rs:ss:ss]
	}
	return nil
}

// UnmarshalRsp decodes an SRP_RSP.
func UnmarshalRsp(b []byte) (*Rsp, error) {
	r := new(Rsp)
	return r, r.Unmarshal(b)
}

// TMFCode returns the task management response code (byte 3 of the
// response data) and whether the IU carries one (RspValid set and at least
// 4 bytes of response data).
func (r *Rsp) TMFCode() (uint8, bool) {
	if r.Flags&RspValid == 0 || len(r.RespData) < 4 {
		return 0, false
	}
	return r.RespData[3], true
}

// NewTMFRsp returns the SRP_RSP answering an SRP_TSK_MGMT as Linux ib_srpt
// builds it (srpt_build_tskmgmt_rsp): flags RspValid, status GOOD, 4 bytes
// of response data with code (TMFRspComplete, TMFRspFailed, ...) in byte 3.
func NewTMFRsp(tag uint64, reqLimDelta uint32, code uint8) *Rsp {
	return &Rsp{ReqLimDelta: reqLimDelta, Tag: tag, Flags: RspValid, RespData: []byte{0, 0, 0, code}}
}
