package srp

import "fmt"

// DescFormat is a data buffer descriptor format code: the high nibble of
// SRP_CMD buf_fmt for DATA-OUT, the low nibble for DATA-IN (T10 SRP r16a
// SRP_CMD; SRP-2 adds immediate data).
type DescFormat uint8

// Descriptor formats.
const (
	DescNone     DescFormat = 0 // SRP_NO_DATA_DESC: no data buffer
	DescDirect   DescFormat = 1 // SRP_DATA_DESC_DIRECT: one struct srp_direct_buf
	DescIndirect DescFormat = 2 // SRP_DATA_DESC_INDIRECT: struct srp_indirect_buf
	DescImm      DescFormat = 3 // SRP_DATA_DESC_IMM (SRP-2): struct srp_imm_buf, DATA-OUT only
)

// String returns NONE, DIRECT, INDIRECT, IMM or the number.
func (f DescFormat) String() string {
	switch f {
	case DescNone:
		return "NONE"
	case DescDirect:
		return "DIRECT"
	case DescIndirect:
		return "INDIRECT"
	case DescImm:
		return "IMM"
	}
	return fmt.Sprintf("DescFormat(%d)", uint8(f))
}

// TaskAttr is the SRP_CMD task_attr field (T10 SRP r16a; SAM-5 §8.6 task
// attributes in bits 2..0).
type TaskAttr uint8

// Task attributes.
const (
	TaskAttrSimple      TaskAttr = 0 // SIMPLE
	TaskAttrHeadOfQueue TaskAttr = 1 // HEAD OF QUEUE
	TaskAttrOrdered     TaskAttr = 2 // ORDERED
	TaskAttrACA         TaskAttr = 4 // ACA
)

// String returns the SAM-5 name (SIMPLE, HEAD OF QUEUE, ORDERED, ACA) or
// the number.
func (a TaskAttr) String() string {
	switch a {
	case TaskAttrSimple:
		return "SIMPLE"
	case TaskAttrHeadOfQueue:
		return "HEAD OF QUEUE"
	case TaskAttrOrdered:
		return "ORDERED"
	case TaskAttrACA:
		return "ACA"
	}
	return fmt.Sprintf("TaskAttr(%d)", uint8(a))
}

// DirectBuf is a memory descriptor (struct srp_direct_buf, 16 bytes): a
// region of initiator memory the target reaches by RDMA.
type DirectBuf struct {
	VA  uint64 // va: virtual address (or offset) of the region
	Key uint32 // key: the remote key (R_Key / STag) of the region
	Len uint32 // len: length in bytes
}

// AppendTo appends the 16-byte descriptor (as the indirect descriptor
// table in initiator memory holds it).
func (d DirectBuf) AppendTo(b []byte) []byte {
	b, p := grow(b, DirectBufSize)
	d.put(p)
	return b
}

func (d DirectBuf) put(p []byte) {
	be.PutUint64(p, d.VA)
	be.PutUint32(p[8:], d.Key)
	be.PutUint32(p[12:], d.Len)
}

func getDirect(p []byte) DirectBuf {
	return DirectBuf{VA: be.Uint64(p), Key: be.Uint32(p[8:]), Len: be.Uint32(p[12:])}
}

// MaxAddCDBLen is the largest additional CDB length in bytes: add_cdb_len
// bits 7..2 count 4-byte words (T10 SRP r16a).
const MaxAddCDBLen = 252

// MaxCDBLen is the largest CDB an SRP_CMD carries: 16 + MaxAddCDBLen bytes.
const MaxCDBLen = 16 + MaxAddCDBLen

// DataBuf is one direction's data buffer descriptor of an SRP_CMD.
//
// Descriptor count rules (data_out_desc_cnt / data_in_desc_cnt), enforced
// by the decoder and the encoder:
//   - DescNone: count 0, no descriptor bytes.
//   - DescDirect: count 0 or 1. Linux ib_srp sends 0 (it only fills the
//     count for indirect descriptors); T10 SRP r16a counts the one
//     descriptor. Desc holds exactly one DirectBuf (16 bytes on the wire).
//   - DescIndirect: count is the number n of descriptors in the inline
//     partial list (ib_srp: min(ndesc, cmd_sg_entries)); the wire carries
//     20 + 16n bytes. Table.Len must be a multiple of 16 and Table.Len/16
//     (the whole table) must be at least n. When the whole table is inline
//     (Table.Len/16 == n), Len must equal the sum of the descriptor
//     lengths. Otherwise the rest of the table is only reachable by RDMA
//     READ of Table ([DataBuf.External]).
//   - DescImm (DATA-OUT only): count 0 or 1 (ib_srp sends 0); 4 bytes of
//     struct srp_imm_buf; the data starts ImmDataOffset bytes from the
//     start of the IU, at or after the end of all descriptors, and must
//     lie within the buffer.
//
// Any other format code (4..15, or IMM in DATA-IN) is rejected.
type DataBuf struct {
	Format DescFormat
	// Count is the raw descriptor count byte. The encoder writes it for
	// DescDirect and DescImm (0 or 1) and writes len(Desc) for
	// DescIndirect.
	Count uint8
	// Desc is the memory descriptor (DescDirect, exactly one) or the
	// inline partial memory descriptor list (DescIndirect, desc_list).
	Desc []DirectBuf
	// Table is table_desc of an indirect descriptor: where the full
	// descriptor table lies in initiator memory, and its length in bytes.
	Table DirectBuf
	// Len is the total data length in bytes: srp_indirect_buf len for
	// DescIndirect, srp_imm_buf len for DescImm (the encoder writes
	// len(Cmd.ImmData) instead).
	Len uint32
}

// TotalLen returns the data length the descriptor declares, in bytes:
// Desc[0].Len for direct, Len for indirect and immediate, 0 for none.
func (d *DataBuf) TotalLen() uint64 {
	switch d.Format {
	case DescDirect:
		if len(d.Desc) > 0 {
			return uint64(d.Desc[0].Len)
		}
	case DescIndirect, DescImm:
		return uint64(d.Len)
	}
	return 0
}

// External reports whether an indirect descriptor's table holds more
// descriptors than were sent inline, so the full list lives only in
// initiator memory at Table (Linux ib_srpt rejects such commands).
func (d *DataBuf) External() bool {
	return d.Format == DescIndirect && uint64(d.Table.Len)/DirectBufSize > uint64(len(d.Desc))
}

// wireLen returns the bytes the descriptor takes in add_data.
func (d *DataBuf) wireLen() int {
	switch d.Format {
	case DescDirect:
		return DirectBufSize
	case DescIndirect:
		return IndirectBufSize + DirectBufSize*len(d.Desc)
	case DescImm:
		return ImmBufSize
	}
	return 0
}

// Cmd is SRP_CMD (T10 SRP r16a; struct srp_cmd, 48 bytes plus
// add_data: the additional CDB bytes, then the DATA-OUT descriptor, then the
// DATA-IN descriptor; SRP-2 immediate data at ImmDataOffset).
type Cmd struct {
	SolNot   uint8    // sol_not
	Tag      uint64   // tag
	LUN      uint64   // lun, 8-byte SAM LUN as big-endian
	TaskAttr TaskAttr // task_attr
	// CDB is the command descriptor block: cdb[16] followed by the
	// additional CDB bytes (add_cdb_len & ~3), 16 to 268 bytes. The encoder
	// pads a shorter CDB with zeros to 16 bytes and a longer one to a
	// multiple of 4. Decoded values alias the input buffer.
	CDB     []byte
	DataOut DataBuf // high nibble of buf_fmt, data_out_desc_cnt
	DataIn  DataBuf // low nibble of buf_fmt, data_in_desc_cnt
	// ImmDataOffset is the offset of immediate data from the start of the
	// IU in bytes (login imm_data_offset), used when DataOut.Format is
	// DescImm; 0 means DefaultImmDataOffset (68).
	ImmDataOffset int
	// ImmData is the immediate data (DataOut.Format == DescImm). Decoded
	// values alias the input buffer.
	ImmData []byte
}

// Opcode returns OpCmd.
func (*Cmd) Opcode() Opcode { return OpCmd }

func (c *Cmd) cdbWire() int {
	n := len(c.CDB)
	if n < 16 {
		return 16
	}
	return (n + 3) &^ 3
}

func (c *Cmd) immOff() int {
	if c.ImmDataOffset == 0 {
		return DefaultImmDataOffset
	}
	return c.ImmDataOffset
}

// descEnd is the offset just past the DATA-IN descriptor.
func (c *Cmd) descEnd() int {
	return CmdSize + c.cdbWire() - 16 + c.DataOut.wireLen() + c.DataIn.wireLen()
}

// Size returns the encoded length in bytes.
func (c *Cmd) Size() int {
	n := c.descEnd()
	if c.DataOut.Format == DescImm {
		n = max(n, c.immOff()) + len(c.ImmData)
	}
	return n
}

func checkEncodeBuf(d *DataBuf, dir string) error {
	cnt := "data_out_desc_cnt" // constant strings: encoding allocates nothing
	if dir == "in" {
		cnt = "data_in_desc_cnt"
	}
	switch d.Format {
	case DescNone:
		if d.Count != 0 {
			return &EncodeError{"SRP_CMD", cnt, "must be 0 without a descriptor"}
		}
	case DescDirect:
		if len(d.Desc) != 1 {
			return &EncodeError{"SRP_CMD", "data_" + dir + " desc", "direct descriptor needs exactly one DirectBuf"}
		}
		if d.Count > 1 {
			return &EncodeError{"SRP_CMD", cnt, "must be 0 or 1 for a direct descriptor"}
		}
	case DescIndirect:
		if len(d.Desc) > 255 {
			return &EncodeError{"SRP_CMD", cnt, "more than 255 inline descriptors"}
		}
		if d.Table.Len%DirectBufSize != 0 || int(d.Table.Len/DirectBufSize) < len(d.Desc) {
			return &EncodeError{"SRP_CMD", "table_desc.len", "must be 16 × descriptors, at least the inline ones"}
		}
		if int(d.Table.Len/DirectBufSize) == len(d.Desc) {
			var sum uint64
			for _, x := range d.Desc {
				sum += uint64(x.Len)
			}
			if sum != uint64(d.Len) {
				return &EncodeError{"SRP_CMD", "len", fmt.Sprintf("total %d differs from the sum %d of the inline table", d.Len, sum)}
			}
		}
	case DescImm:
		if dir == "in" {
			return &EncodeError{"SRP_CMD", "buf_fmt", "immediate data is DATA-OUT only"}
		}
		if d.Count > 1 {
			return &EncodeError{"SRP_CMD", cnt, "must be 0 or 1 for immediate data"}
		}
	default:
		return &EncodeError{"SRP_CMD", "buf_fmt", fmt.Sprintf("unsupported descriptor format %d", d.Format)}
	}
	return nil
}

// MaxImmDataOffset is the largest immediate-data offset in bytes: the
// login request carries imm_data_offset in 16 bits.
const MaxImmDataOffset = 0xffff

// AppendTo appends the SRP_CMD. It fails for a CDB over 268 bytes,
// descriptors that break the [DataBuf] rules, immediate data that would
// start before the end of the descriptors or past MaxImmDataOffset, or is
// over 4 GiB.
func (c *Cmd) AppendTo(b []byte) ([]byte, error) {
	if len(c.CDB) > MaxCDBLen {
		return b, &EncodeError{"SRP_CMD", "add_cdb_len", fmt.Sprintf("CDB of %d bytes exceeds %d", len(c.CDB), MaxCDBLen)}
	}
	if err := checkEncodeBuf(&c.DataOut, "out"); err != nil {
		return b, err
	}
	if err := checkEncodeBuf(&c.DataIn, "in"); err != nil {
		return b, err
	}
	if c.DataOut.Format == DescImm {
		if c.immOff() > MaxImmDataOffset {
			return b, &EncodeError{"SRP_CMD", "imm_data_offset", fmt.Sprintf("%d does not fit the 16-bit login field", c.immOff())}
		}
		if c.immOff() < c.descEnd() {
			return b, &EncodeError{"SRP_CMD", "imm_data_offset", fmt.Sprintf("%d is inside the descriptors (end %d)", c.immOff(), c.descEnd())}
		}
		if uint64(len(c.ImmData)) > maxIULen {
			return b, &EncodeError{"SRP_CMD", "imm_buf.len", "immediate data over 4 GiB"}
		}
	}
	// The immediate data is copied over its whole length below; only the
	// bytes before it are zeroed (a 4 KiB WRITE's IU is mostly its data).
	b, p := growDirty(b, c.Size())
	if c.DataOut.Format == DescImm {
		clear(p[:len(p)-len(c.ImmData)])
	} else {
		clear(p)
	}
	p[0] = byte(OpCmd)
	p[1] = c.SolNot
	p[5] = byte(c.DataOut.Format)<<4 | byte(c.DataIn.Format)
	p[6] = c.DataOut.Count
	if c.DataOut.Format == DescIndirect {
		p[6] = uint8(len(c.DataOut.Desc))
	}
	p[7] = c.DataIn.Count
	if c.DataIn.Format == DescIndirect {
		p[7] = uint8(len(c.DataIn.Desc))
	}
	be.PutUint64(p[8:], c.Tag)
	be.PutUint64(p[20:], c.LUN)
	p[29] = byte(c.TaskAttr)
	add := c.cdbWire() - 16
	p[31] = byte(add)
	copy(p[32:], c.CDB)
	off := CmdSize + add
	off = putBuf(p, off, &c.DataOut, uint32(len(c.ImmData)))
	putBuf(p, off, &c.DataIn, 0)
	if c.DataOut.Format == DescImm {
		copy(p[c.immOff():], c.ImmData)
	}
	return b, nil
}

func putBuf(p []byte, off int, d *DataBuf, immLen uint32) int {
	switch d.Format {
	case DescDirect:
		d.Desc[0].put(p[off:])
		return off + DirectBufSize
	case DescIndirect:
		d.Table.put(p[off:])
		be.PutUint32(p[off+16:], d.Len)
		off += IndirectBufSize
		for _, x := range d.Desc {
			x.put(p[off:])
			off += DirectBufSize
		}
		return off
	case DescImm:
		be.PutUint32(p[off:], immLen)
		return off + ImmBufSize
	}
	return off
}

// Marshal returns the encoded SRP_CMD.
func (c *Cmd) Marshal() ([]byte, error) { return c.AppendTo(nil) }

// Unmarshal decodes an SRP_CMD whose immediate data, if any, starts at
// DefaultImmDataOffset (68, as Linux ib_srp sends). See UnmarshalImm.
func (c *Cmd) Unmarshal(b []byte) error { return c.UnmarshalImm(b, DefaultImmDataOffset) }

// UnmarshalImm decodes an SRP_CMD whose immediate data, if any, starts
// immDataOffset bytes from the start of the IU (the imm_data_offset the
// initiator gave at login, at most MaxImmDataOffset). It enforces the
// [DataBuf] rules. CDB and
// ImmData alias b; the descriptor slices reuse the capacity of c's, so
// decoding repeatedly into the same Cmd does not allocate. On error c is
// left in an unspecified state.
func (c *Cmd) UnmarshalImm(b []byte, immDataOffset int) error {
	const iu = "SRP_CMD"
	if err := checkFixed(b, OpCmd, CmdSize); err != nil {
		return err
	}
	add := int(b[31] &^ 3)
	if len(b) < CmdSize+add {
		return errShort(iu, "add_cdb_len", 31, CmdSize+add, len(b))
	}
	outFmt, inFmt := DescFormat(b[5]>>4), DescFormat(b[5]&0xf)
	c.SolNot = b[1]
	c.Tag = be.Uint64(b[8:])
	c.LUN = be.Uint64(b[20:])
	c.TaskAttr = TaskAttr(b[29])
	c.CDB = b[32 : CmdSize+add : CmdSize+add]
	c.ImmData = nil
	c.ImmDataOffset = 0
	off, err := getBuf(b, CmdSize+add, outFmt, b[6], "out", &c.DataOut)
	if err != nil {
		return err
	}
	end, err := getBuf(b, off, inFmt, b[7], "in", &c.DataIn)
	if err != nil {
		return err
	}
	if outFmt == DescImm {
		if immDataOffset > MaxImmDataOffset {
			return errInvalid(iu, "imm_data_offset", off, "%d does not fit the 16-bit login field", immDataOffset)
		}
		if immDataOffset < end {
			return errInvalid(iu, "imm_data_offset", off, "immediate data at %d starts inside the descriptors (end %d)", immDataOffset, end)
		}
		n := uint64(c.DataOut.Len)
		if uint64(immDataOffset) > uint64(len(b)) || n > uint64(len(b)-immDataOffset) {
			return errShort(iu, "imm_buf.len", off, clampInt(uint64(immDataOffset)+n), len(b))
		}
		c.ImmDataOffset = immDataOffset
		c.ImmData = b[immDataOffset : immDataOffset+int(n) : immDataOffset+int(n)]
	}
	return nil
}

// getBuf decodes one direction's descriptor at off and returns the offset
// after it.
func getBuf(b []byte, off int, f DescFormat, cnt uint8, dir string, d *DataBuf) (int, error) {
	const iu = "SRP_CMD"
	cntField, cntOff := "data_out_desc_cnt", 6
	if dir == "in" {
		cntField, cntOff = "data_in_desc_cnt", 7
	}
	d.Format, d.Count, d.Table, d.Len = f, cnt, DirectBuf{}, 0
	d.Desc = d.Desc[:0]
	switch f {
	case DescNone:
		if cnt != 0 {
			return 0, errInvalid(iu, cntField, cntOff, "%d with no data-%s descriptor", cnt, dir)
		}
		return off, nil
	case DescDirect:
		if cnt > 1 {
			return 0, errInvalid(iu, cntField, cntOff, "%d for a direct descriptor (want 0 or 1)", cnt)
		}
		if len(b)-off < DirectBufSize {
			return 0, errShort(iu, "data_"+dir+" srp_direct_buf", off, off+DirectBufSize, len(b))
		}
		d.Desc = append(d.Desc, getDirect(b[off:]))
		return off + DirectBufSize, nil
	case DescIndirect:
		if len(b)-off < IndirectBufSize {
			return 0, errShort(iu, "data_"+dir+" srp_indirect_buf", off, off+IndirectBufSize, len(b))
		}
		d.Table = getDirect(b[off:])
		d.Len = be.Uint32(b[off+16:])
		if d.Table.Len%DirectBufSize != 0 {
			return 0, errInvalid(iu, "table_desc.len", off+12, "%d is not a multiple of 16", d.Table.Len)
		}
		if uint32(cnt) > d.Table.Len/DirectBufSize {
			return 0, errInvalid(iu, cntField, cntOff, "%d inline descriptors but table_desc.len %d holds %d", cnt, d.Table.Len, d.Table.Len/DirectBufSize)
		}
		list := off + IndirectBufSize
		need := list + DirectBufSize*int(cnt)
		if len(b) < need {
			return 0, errShort(iu, "desc_list", list, need, len(b))
		}
		var sum uint64
		for i := range int(cnt) {
			x := getDirect(b[list+DirectBufSize*i:])
			sum += uint64(x.Len)
			d.Desc = append(d.Desc, x)
		}
		if uint32(cnt) == d.Table.Len/DirectBufSize && sum != uint64(d.Len) {
			return 0, errInvalid(iu, "len", off+16, "total %d differs from the sum %d of the descriptor list", d.Len, sum)
		}
		return need, nil
	case DescImm:
		if dir == "in" {
			return 0, errInvalid(iu, "buf_fmt", 5, "immediate data format in the DATA-IN nibble")
		}
		if cnt > 1 {
			return 0, errInvalid(iu, cntField, cntOff, "%d for immediate data (want 0 or 1)", cnt)
		}
		if len(b)-off < ImmBufSize {
			return 0, errShort(iu, "imm_buf", off, off+ImmBufSize, len(b))
		}
		d.Len = be.Uint32(b[off:])
		return off + ImmBufSize, nil
	}
	return 0, errInvalid(iu, "buf_fmt", 5, "unsupported data-%s descriptor format %d", dir, f)
}

// UnmarshalCmd decodes an SRP_CMD with immediate data, if any, at
// DefaultImmDataOffset.
func UnmarshalCmd(b []byte) (*Cmd, error) {
	c := new(Cmd)
	return c, c.Unmarshal(b)
}

// Data returns what the target must move for c: the DATA-OUT and DATA-IN
// memory descriptors (inline ones only for indirect descriptors; nil for
// none and immediate data) and the declared total lengths in bytes (see
// [DataBuf.TotalLen]). The slices alias c.
func (c *Cmd) Data() (out, in []DirectBuf, outLen, inLen uint64) {
	if c.DataOut.Format == DescDirect || c.DataOut.Format == DescIndirect {
		out = c.DataOut.Desc
	}
	if c.DataIn.Format == DescDirect || c.DataIn.Format == DescIndirect {
		in = c.DataIn.Desc
	}
	return out, in, c.DataOut.TotalLen(), c.DataIn.TotalLen()
}
