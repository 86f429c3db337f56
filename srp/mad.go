package srp

import (
	"bytes"
	"fmt"
)

// InfiniBand Device Management (DM) MADs: the queries srp_daemon and ibsrpdm
// send to find SRP targets, and the attributes an SRP target answers with
// (IBA vol 1 §13.4 MAD formats, §16.3 Device Management; T10 SRP r16a
// annex B.7; Linux ib_srpt srpt_mgmt_method_get, ib_dm_mad.h).

// MAD sizes and offsets in bytes.
const (
	MADSize       = 256 // every MAD on QP1
	MADHeaderSize = 24  // common MAD header (struct ib_mad_hdr)
	DMDataOffset  = 64  // DM attribute data: header, 40 reserved bytes (RMPP and DM header, unused by DM)
	DMDataSize    = 192 // IB_MGMT_DEVICE_DATA
)

// Management class, versions and methods of DM MADs.
const (
	MgmtClassDM       = 0x06 // IB_MGMT_CLASS_DEVICE_MGMT
	MADBaseVersion    = 1    // IB_MGMT_BASE_VERSION
	DMClassVersion    = 1
	MethodGet         = 0x01 // IB_MGMT_METHOD_GET
	MethodSet         = 0x02 // IB_MGMT_METHOD_SET
	MethodGetResp     = 0x81 // IB_MGMT_METHOD_GET_RESP
	MethodTrap        = 0x05 // IB_MGMT_METHOD_TRAP
	MethodTrapRepress = 0x07 // IB_MGMT_METHOD_TRAP_REPRESS
)

// DM attribute IDs (IBA §16.3.3 table 279).
const (
	AttrClassPortInfo       = 0x0001
	AttrIOUnitInfo          = 0x0010
	AttrIOControllerProfile = 0x0011
	AttrServiceEntries      = 0x0012
)

// MAD status values ib_srpt returns (IBA §13.4.7 table 115, §16.3.1.1).
const (
	MADStatusOK              = 0x0000
	MADStatusUnsupMethod     = 0x0008 // method not supported
	MADStatusUnsupMethodAttr = 0x000c // method/attribute combination not supported
	MADStatusInvalidField    = 0x001c // invalid value in an attribute field (DM_MAD_STATUS_INVALID_FIELD)
	MADStatusNoIOC           = 0x0100 // DM: no I/O controller in that slot
)

// MADHeader is the 24-byte common MAD header (struct ib_mad_hdr).
type MADHeader struct {
	BaseVersion   uint8  // base_version, 1
	MgmtClass     uint8  // mgmt_class, MgmtClassDM for DM
	ClassVersion  uint8  // class_version
	Method        uint8  // method (MethodGet, MethodGetResp, ...)
	Status        uint16 // status
	ClassSpecific uint16 // class_specific
	TID           uint64 // tid: transaction ID, echoed in the response
	AttrID        uint16 // attr_id
	AttrMod       uint32 // attr_mod
}

func (h *MADHeader) put(p []byte) {
	p[0], p[1], p[2], p[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	be.PutUint16(p[4:], h.Status)
	be.PutUint16(p[6:], h.ClassSpecific)
	be.PutUint64(p[8:], h.TID)
	be.PutUint16(p[16:], h.AttrID)
	be.PutUint32(p[20:], h.AttrMod)
}

func (h *MADHeader) get(p []byte) {
	*h = MADHeader{
		BaseVersion: p[0], MgmtClass: p[1], ClassVersion: p[2], Method: p[3],
		Status: be.Uint16(p[4:]), ClassSpecific: be.Uint16(p[6:]),
		TID: be.Uint64(p[8:]), AttrID: be.Uint16(p[16:]), AttrMod: be.Uint32(p[20:]),
	}
}

// DMMAD is a 256-byte Device Management MAD (struct ib_dm_mad): the common
// header, 40 reserved bytes, and 192 bytes of attribute data.
type DMMAD struct {
	MADHeader
	Data [DMDataSize]byte
}

// AppendTo appends the 256-byte MAD (bytes 24..63 zero).
func (m *DMMAD) AppendTo(b []byte) []byte {
	b, p := grow(b, MADSize)
	m.MADHeader.put(p)
	copy(p[DMDataOffset:], m.Data[:])
	return b
}

// Marshal returns the 256-byte MAD.
func (m *DMMAD) Marshal() []byte { return m.AppendTo(nil) }

// Unmarshal decodes a DM MAD. b must hold at least 256 bytes, with
// mgmt_class MgmtClassDM. Other header values are returned for the caller
// to judge (a responder answers bad methods with a status).
func (m *DMMAD) Unmarshal(b []byte) error {
	const iu = "ib_dm_mad"
	if len(b) < MADSize {
		return errFixedShort(iu, dmMADMembers, MADSize, len(b))
	}
	if b[1] != MgmtClassDM {
		return errInvalid(iu, "mgmt_class", 1, "%#02x is not Device Management (0x06)", b[1])
	}
	m.MADHeader.get(b)
	copy(m.Data[:], b[DMDataOffset:MADSize])
	return nil
}

// UnmarshalDMMAD decodes a DM MAD.
func UnmarshalDMMAD(b []byte) (*DMMAD, error) {
	m := new(DMMAD)
	return m, m.Unmarshal(b)
}

// DMAttribute is an attribute carried in DMMAD.Data.
type DMAttribute interface {
	AttrID() uint16
	// AppendTo appends the attribute's wire form.
	AppendTo(b []byte) []byte
}

// SetAttr encodes a into m.Data (zeroing the rest) and sets m.AttrID.
func (m *DMMAD) SetAttr(a DMAttribute) {
	m.Data = [DMDataSize]byte{}
	copy(m.Data[:], a.AppendTo(m.Data[:0]))
	m.AttrID = a.AttrID()
}

// Response returns the GetResp header for request h with status: the same
// versions, class, TID, attribute ID and modifier (ib_srpt copies the
// request and sets method and status).
func (h MADHeader) Response(status uint16) MADHeader {
	r := h
	r.Method = MethodGetResp
	r.Status = status
	return r
}

// ClassPortInfo is the ClassPortInfo attribute (IBA §13.4.8.1, 72 bytes;
// struct ib_class_port_info).
type ClassPortInfo struct {
	BaseVersion     uint8  // base_version
	ClassVersion    uint8  // class_version
	CapabilityMask  uint16 // capability_mask
	CapabilityMask2 uint32 // upper 27 bits of cap_mask2_resp_time
	// RespTimeValue is the low 5 bits of cap_mask2_resp_time: response
	// time 4.096 µs × 2^RespTimeValue.
	RespTimeValue  uint8
	RedirectGID    [16]byte // redirect_gid
	RedirectTCSLFL uint32   // redirect_tcslfl: TC (8 bits), SL (4), flow label (20)
	RedirectLID    uint16   // redirect_lid
	RedirectPKey   uint16   // redirect_pkey
	RedirectQP     uint32   // redirect_qp (24 bits)
	RedirectQKey   uint32   // redirect_qkey
	TrapGID        [16]byte // trap_gid
	TrapTCSLFL     uint32   // trap_tcslfl
	TrapLID        uint16   // trap_lid
	TrapPKey       uint16   // trap_pkey
	TrapHLQP       uint32   // trap_hlqp: hop limit (8 bits), QP (24)
	TrapQKey       uint32   // trap_qkey
}

// ClassPortInfoSize is the encoded size of ClassPortInfo in bytes.
const ClassPortInfoSize = 72

// AttrID returns AttrClassPortInfo.
func (*ClassPortInfo) AttrID() uint16 { return AttrClassPortInfo }

// AppendTo appends the 72-byte attribute.
func (c *ClassPortInfo) AppendTo(b []byte) []byte {
	b, p := grow(b, ClassPortInfoSize)
	p[0], p[1] = c.BaseVersion, c.ClassVersion
	be.PutUint16(p[2:], c.CapabilityMask)
	be.PutUint32(p[4:], c.CapabilityMask2<<5|uint32(c.RespTimeValue&0x1f))
	copy(p[8:24], c.RedirectGID[:])
	be.PutUint32(p[24:], c.RedirectTCSLFL)
	be.PutUint16(p[28:], c.RedirectLID)
	be.PutUint16(p[30:], c.RedirectPKey)
	be.PutUint32(p[32:], c.RedirectQP)
	be.PutUint32(p[36:], c.RedirectQKey)
	copy(p[40:56], c.TrapGID[:])
	be.PutUint32(p[56:], c.TrapTCSLFL)
	be.PutUint16(p[60:], c.TrapLID)
	be.PutUint16(p[62:], c.TrapPKey)
	be.PutUint32(p[64:], c.TrapHLQP)
	be.PutUint32(p[68:], c.TrapQKey)
	return b
}

// Unmarshal decodes the attribute from the first 72 bytes of b.
func (c *ClassPortInfo) Unmarshal(b []byte) error {
	if len(b) < ClassPortInfoSize {
		return errFixedShort("ClassPortInfo", classPortInfoMembers, ClassPortInfoSize, len(b))
	}
	w := be.Uint32(b[4:])
	*c = ClassPortInfo{
		BaseVersion: b[0], ClassVersion: b[1], CapabilityMask: be.Uint16(b[2:]),
		CapabilityMask2: w >> 5, RespTimeValue: uint8(w & 0x1f),
		RedirectTCSLFL: be.Uint32(b[24:]), RedirectLID: be.Uint16(b[28:]), RedirectPKey: be.Uint16(b[30:]),
		RedirectQP: be.Uint32(b[32:]), RedirectQKey: be.Uint32(b[36:]),
		TrapTCSLFL: be.Uint32(b[56:]), TrapLID: be.Uint16(b[60:]), TrapPKey: be.Uint16(b[62:]),
		TrapHLQP: be.Uint32(b[64:]), TrapQKey: be.Uint32(b[68:]),
	}
	copy(c.RedirectGID[:], b[8:24])
	copy(c.TrapGID[:], b[40:56])
	return nil
}

// SRPTClassPortInfo returns the ClassPortInfo ib_srpt answers with: base
// and class version 1, RespTimeValue 20, all else zero
// (srpt_get_class_port_info).
func SRPTClassPortInfo() ClassPortInfo {
	return ClassPortInfo{BaseVersion: 1, ClassVersion: 1, RespTimeValue: 20}
}

// IOUnitInfo is the IOUnitInfo attribute (IBA §16.3.3.3, 132 bytes; struct
// ib_dm_iou_info).
type IOUnitInfo struct {
	ChangeID       uint16 // change_id
	MaxControllers uint8  // max_controllers: number of controller slots
	// OptionROM is byte 3: bit 0 option ROM present, bit 1 diagnostic
	// device ID (IBA §16.3.3.3).
	OptionROM uint8
	// ControllerList holds a 4-bit state per slot, slot 1 in the high nibble
	// of byte 0 (0 not installed, 1 present, 0xf slot does not exist).
	ControllerList [128]byte
}

// IOUnitInfoSize is the encoded size of IOUnitInfo in bytes.
const IOUnitInfoSize = 132

// Controller slot states in IOUnitInfo.ControllerList.
const (
	IOCNotInstalled = 0x0
	IOCPresent      = 0x1
	IOCNoSlot       = 0xf
)

// AttrID returns AttrIOUnitInfo.
func (*IOUnitInfo) AttrID() uint16 { return AttrIOUnitInfo }

// Controller returns the 4-bit state of slot (1-based); 0xf outside 1..256.
func (u *IOUnitInfo) Controller(slot int) uint8 {
	if slot < 1 || slot > 256 {
		return IOCNoSlot
	}
	v := u.ControllerList[(slot-1)/2]
	if slot&1 == 1 {
		return v >> 4
	}
	return v & 0xf
}

// SetController sets the 4-bit state of slot (1-based); it ignores slots
// outside 1..256 (srpt_set_ioc).
func (u *IOUnitInfo) SetController(slot int, state uint8) {
	if slot < 1 || slot > 256 {
		return
	}
	i := (slot - 1) / 2
	if slot&1 == 1 {
		u.ControllerList[i] = u.ControllerList[i]&0x0f | state<<4
	} else {
		u.ControllerList[i] = u.ControllerList[i]&0xf0 | state&0xf
	}
}

// AppendTo appends the 132-byte attribute.
func (u *IOUnitInfo) AppendTo(b []byte) []byte {
	b, p := grow(b, IOUnitInfoSize)
	be.PutUint16(p, u.ChangeID)
	p[2], p[3] = u.MaxControllers, u.OptionROM
	copy(p[4:], u.ControllerList[:])
	return b
}

// Unmarshal decodes the attribute from the first 132 bytes of b.
func (u *IOUnitInfo) Unmarshal(b []byte) error {
	if len(b) < IOUnitInfoSize {
		return errFixedShort("IOUnitInfo", iouInfoMembers, IOUnitInfoSize, len(b))
	}
	u.ChangeID, u.MaxControllers, u.OptionROM = be.Uint16(b), b[2], b[3]
	copy(u.ControllerList[:], b[4:IOUnitInfoSize])
	return nil
}

// SRPTIOUnitInfo returns the IOUnitInfo ib_srpt answers with: change_id 1,
// 16 controller slots, an I/O controller present in slot 1 only
// (srpt_get_iou).
func SRPTIOUnitInfo() IOUnitInfo {
	u := IOUnitInfo{ChangeID: 1, MaxControllers: 16}
	u.SetController(1, IOCPresent)
	return u
}

// IOControllerProfile is the IOControllerProfile attribute (IBA §16.3.3.4,
// 128 bytes; struct ib_dm_ioc_profile; T10 SRP r16a table B.7).
type IOControllerProfile struct {
	GUID                uint64 // guid: I/O controller GUID (ib_srpt: srpt_service_guid)
	VendorID            uint32 // vendor_id (24 bits)
	DeviceID            uint32 // device_id
	DeviceVersion       uint16 // device_version
	SubsysVendorID      uint32 // subsys_vendor_id (24 bits)
	SubsysDeviceID      uint32 // subsys_device_id
	IOClass             uint16 // io_class: IOClassSRPRev16A for SRP
	IOSubclass          uint16 // io_subclass: 0x609e for SRP
	Protocol            uint16 // protocol: 0x0108 for SRP
	ProtocolVersion     uint16 // protocol_version: 1
	ServiceConn         uint16 // service_conn
	InitiatorsSupported uint16 // initiators_supported
	SendQueueDepth      uint16 // send_queue_depth, in IUs
	RDMAReadDepth       uint8  // rdma_read_depth
	SendSize            uint32 // send_size: largest IU the controller receives, bytes
	RDMASize            uint32 // rdma_size: largest RDMA transfer, bytes
	OpCapMask           uint8  // op_cap_mask (SRP: send to/from IOC, RDMA read/write from IOC)
	SvcCapMask          uint8  // svc_cap_mask
	NumSvcEntries       uint8  // num_svc_entries
	// IDString is id_string, at most 64 bytes, NUL padded on the wire.
	IDString string
}

// IOControllerProfileSize is the encoded size in bytes.
const IOControllerProfileSize = 128

// SRP values for IOControllerProfile (include/scsi/srp.h, ib_srpt.h).
const (
	SRPIOSubclass      = 0x609e // SRP_IO_SUBCLASS
	SRPProtocol        = 0x0108 // SRP_PROTOCOL
	SRPProtocolVersion = 0x0001 // SRP_PROTOCOL_VERSION
	// SRPOpCapMask is SEND_TO_IOC | SEND_FROM_IOC | RDMA_READ_FROM_IOC |
	// RDMA_WRITE_FROM_IOC, what ib_srpt advertises.
	SRPOpCapMask = 0x01 | 0x02 | 0x08 | 0x20
	// SRPTIDString is ib_srpt's IOControllerProfile id_string.
	SRPTIDString = "Linux SRP target"
	// ServiceNamePrefix starts every SRP service entry name.
	ServiceNamePrefix = "SRP.T10:"
)

// AttrID returns AttrIOControllerProfile.
func (*IOControllerProfile) AttrID() uint16 { return AttrIOControllerProfile }

// AppendTo appends the 128-byte attribute; IDString is truncated to 64
// bytes.
func (c *IOControllerProfile) AppendTo(b []byte) []byte {
	b, p := grow(b, IOControllerProfileSize)
	be.PutUint64(p[0:], c.GUID)
	be.PutUint32(p[8:], c.VendorID)
	be.PutUint32(p[12:], c.DeviceID)
	be.PutUint16(p[16:], c.DeviceVersion)
	be.PutUint32(p[20:], c.SubsysVendorID)
	be.PutUint32(p[24:], c.SubsysDeviceID)
	be.PutUint16(p[28:], c.IOClass)
	be.PutUint16(p[30:], c.IOSubclass)
	be.PutUint16(p[32:], c.Protocol)
	be.PutUint16(p[34:], c.ProtocolVersion)
	be.PutUint16(p[36:], c.ServiceConn)
	be.PutUint16(p[38:], c.InitiatorsSupported)
	be.PutUint16(p[40:], c.SendQueueDepth)
	p[43] = c.RDMAReadDepth
	be.PutUint32(p[44:], c.SendSize)
	be.PutUint32(p[48:], c.RDMASize)
	p[52], p[53], p[54] = c.OpCapMask, c.SvcCapMask, c.NumSvcEntries
	copy(p[64:128], c.IDString)
	return b
}

// Unmarshal decodes the attribute from the first 128 bytes of b. IDString
// stops at the first NUL.
func (c *IOControllerProfile) Unmarshal(b []byte) error {
	if len(b) < IOControllerProfileSize {
		return errFixedShort("IOControllerProfile", iocProfileMembers, IOControllerProfileSize, len(b))
	}
	*c = IOControllerProfile{
		GUID: be.Uint64(b[0:]), VendorID: be.Uint32(b[8:]), DeviceID: be.Uint32(b[12:]),
		DeviceVersion: be.Uint16(b[16:]), SubsysVendorID: be.Uint32(b[20:]), SubsysDeviceID: be.Uint32(b[24:]),
		IOClass: be.Uint16(b[28:]), IOSubclass: be.Uint16(b[30:]), Protocol: be.Uint16(b[32:]),
		ProtocolVersion: be.Uint16(b[34:]), ServiceConn: be.Uint16(b[36:]), InitiatorsSupported: be.Uint16(b[38:]),
		SendQueueDepth: be.Uint16(b[40:]), RDMAReadDepth: b[43], SendSize: be.Uint32(b[44:]), RDMASize: be.Uint32(b[48:]),
		OpCapMask: b[52], SvcCapMask: b[53], NumSvcEntries: b[54],
		IDString: cString(b[64:128]),
	}
	return nil
}

// SRPTIOControllerProfile returns the IOControllerProfile fields ib_srpt
// fixes (srpt_get_ioc): guid, io_class 0x0100, io_subclass 0x609e, protocol
// 0x0108, protocol_version 1, rdma_read_depth 4, op_cap_mask 0x2b, one
// service entry, id_string "Linux SRP target". The caller fills in the
// device fields (vendor_id, device_id, device_version, subsys_vendor_id),
// send_queue_depth, send_size (srp_max_req_size) and rdma_size.
func SRPTIOControllerProfile(guid uint64) IOControllerProfile {
	return IOControllerProfile{
		GUID: guid, IOClass: IOClassSRPRev16A, IOSubclass: SRPIOSubclass, Protocol: SRPProtocol,
		ProtocolVersion: SRPProtocolVersion, RDMAReadDepth: 4, OpCapMask: SRPOpCapMask,
		NumSvcEntries: 1, IDString: SRPTIDString,
	}
}

// ServiceEntry is one 48-byte service entry (struct ib_dm_svc_entry): a
// 40-byte NUL-padded name and a 64-bit service ID.
type ServiceEntry struct {
	Name string // name, at most 40 bytes
	ID   uint64 // id: the IB CM service ID
}

// ServiceEntries is the ServiceEntries attribute (IBA §16.3.3.5, up to four
// 48-byte entries per MAD; T10 SRP r16a table B.8).
type ServiceEntries [4]ServiceEntry

// ServiceEntriesSize is the encoded size in bytes (4 × 48).
const ServiceEntriesSize = 192

// AttrID returns AttrServiceEntries.
func (*ServiceEntries) AttrID() uint16 { return AttrServiceEntries }

// AppendTo appends the 192-byte attribute; names are truncated to 40 bytes.
func (s *ServiceEntries) AppendTo(b []byte) []byte {
	b, p := grow(b, ServiceEntriesSize)
	for i, e := range s {
		q := p[48*i:]
		copy(q[:40], e.Name)
		be.PutUint64(q[40:], e.ID)
	}
	return b
}

// Unmarshal decodes the four entries from the first 192 bytes of b.
func (s *ServiceEntries) Unmarshal(b []byte) error {
	if len(b) < ServiceEntriesSize {
		return errFixedShort("ServiceEntries", svcEntriesMembers, ServiceEntriesSize, len(b))
	}
	for i := range s {
		q := b[48*i:]
		s[i] = ServiceEntry{Name: cString(q[:40]), ID: be.Uint64(q[40:])}
	}
	return nil
}

// ServiceName returns the SRP service entry name for a service ID:
// "SRP.T10:" followed by 16 lowercase hex digits (srpt_get_svc_entries).
func ServiceName(id uint64) string { return fmt.Sprintf("%s%016x", ServiceNamePrefix, id) }

// SRPTServiceEntries returns the ServiceEntries ib_srpt answers with: one
// entry named ServiceName(id) with that ID (id = ioc_guid = service ID).
func SRPTServiceEntries(id uint64) ServiceEntries {
	return ServiceEntries{{Name: ServiceName(id), ID: id}}
}

// ServiceEntriesMod splits a ServiceEntries attribute modifier into the
// controller slot (bits 31..16) and the last and first entry index (bits
// 15..8 and 7..0).
func ServiceEntriesMod(attrMod uint32) (slot uint16, hi, lo uint8) {
	return uint16(attrMod >> 16), uint8(attrMod >> 8), uint8(attrMod)
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Members of the MAD structures (ib_mad.h struct ib_mad_hdr, ib_dm_mad.h,
// struct ib_class_port_info), for naming the member a short buffer cuts.
var (
	dmMADMembers = []member{{"base_version", 0}, {"mgmt_class", 1}, {"class_version", 2}, {"method", 3},
		{"status", 4}, {"class_specific", 6}, {"tid", 8}, {"attr_id", 16}, {"resv", 18}, {"attr_mod", 20},
		{"rmpp_hdr", 24}, {"dm_hdr", 36}, {"data", DMDataOffset}}
	classPortInfoMembers = []member{{"base_version", 0}, {"class_version", 1}, {"capability_mask", 2},
		{"cap_mask2_resp_time", 4}, {"redirect_gid", 8}, {"redirect_tcslfl", 24}, {"redirect_lid", 28},
		{"redirect_pkey", 30}, {"redirect_qp", 32}, {"redirect_qkey", 36}, {"trap_gid", 40}, {"trap_tcslfl", 56},
		{"trap_lid", 60}, {"trap_pkey", 62}, {"trap_hlqp", 64}, {"trap_qkey", 68}}
	iouInfoMembers    = []member{{"change_id", 0}, {"max_controllers", 2}, {"op_rom", 3}, {"controller_list", 4}}
	iocProfileMembers = []member{{"guid", 0}, {"vendor_id", 8}, {"device_id", 12}, {"device_version", 16},
		{"reserved1", 18}, {"subsys_vendor_id", 20}, {"subsys_device_id", 24}, {"io_class", 28},
		{"io_subclass", 30}, {"protocol", 32}, {"protocol_version", 34}, {"service_conn", 36},
		{"initiators_supported", 38}, {"send_queue_depth", 40}, {"reserved2", 42}, {"rdma_read_depth", 43},
		{"send_size", 44}, {"rdma_size", 48}, {"op_cap_mask", 52}, {"svc_cap_mask", 53},
		{"num_svc_entries", 54}, {"reserved3", 55}, {"id_string", 64}}
	svcEntriesMembers = func() []member {
		var ms []member
		for i := range 4 {
			ms = append(ms, member{fmt.Sprintf("service_entries[%d].name", i), 48 * i},
				member{fmt.Sprintf("service_entries[%d].id", i), 48*i + 40})
		}
		return ms
	}()
)
