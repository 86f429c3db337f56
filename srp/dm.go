package srp

// DMResponder answers Device Management MADs the way Linux ib_srpt does
// (srpt_mad_recv_handler, srpt_mgmt_method_get): one I/O controller in slot
// 1 with one SRP service entry. It is a pure function of its fields and
// safe for concurrent use if they are not modified.
type DMResponder struct {
	// Profile is returned for IOControllerProfile queries; start from
	// SRPTIOControllerProfile and fill in the device fields.
	Profile IOControllerProfile
	// ServiceID is the ID of the single service entry (ib_srpt:
	// srpt_service_guid, which is also id_ext and ioc_guid).
	ServiceID uint64
}

// Answer returns the response to req. Like ib_srpt, the response starts as a
// copy of the request with method GetResp and status 0; then:
//   - Set: status MADStatusUnsupMethodAttr; other non-Get methods:
//     MADStatusUnsupMethod.
//   - ClassPortInfo: SRPTClassPortInfo.
//   - IOUnitInfo: change_id 1, 16 slots, slot 1 present, slots 2-16 empty
//     (bytes not covered keep the request's contents, as in ib_srpt).
//   - IOControllerProfile (attr_mod = slot): slot 0 or above 16 →
//     MADStatusInvalidField; above 2 → MADStatusNoIOC; else Profile.
//   - ServiceEntries (attr_mod = slot<<16 | hi<<8 | lo): slot 0 or above
//     16 → MADStatusInvalidField; slot above 2, lo > hi or hi > 1 →
//     MADStatusNoIOC; else the entry ServiceName(ServiceID).
//   - any other attribute: MADStatusUnsupMethodAttr.
func (r *DMResponder) Answer(req *DMMAD) DMMAD {
	rsp := *req
	rsp.MADHeader = req.MADHeader.Response(MADStatusOK)
	switch req.Method {
	case MethodGet:
	case MethodSet:
		rsp.Status = MADStatusUnsupMethodAttr
		return rsp
	default:
		rsp.Status = MADStatusUnsupMethod
		return rsp
	}
	switch req.AttrID {
	case AttrClassPortInfo:
		c := SRPTClassPortInfo()
		c.AppendTo(rsp.Data[:0])
	case AttrIOUnitInfo:
		var u IOUnitInfo
		u.ChangeID, u.MaxControllers = 1, 16
		copy(u.ControllerList[:], rsp.Data[4:4+len(u.ControllerList)])
		u.OptionROM = rsp.Data[3]
		u.SetController(1, IOCPresent)
		for slot := 2; slot <= 16; slot++ {
			u.SetController(slot, IOCNotInstalled)
		}
		u.AppendTo(rsp.Data[:0])
	case AttrIOControllerProfile:
		slot := req.AttrMod
		switch {
		case slot == 0 || slot > 16:
			rsp.Status = MADStatusInvalidField
		case slot > 2:
			rsp.Status = MADStatusNoIOC
		default:
			r.Profile.AppendTo(rsp.Data[:0])
		}
	case AttrServiceEntries:
		slot, hi, lo := ServiceEntriesMod(req.AttrMod)
		switch {
		case slot == 0 || slot > 16:
			rsp.Status = MADStatusInvalidField
		case slot > 2 || lo > hi || hi > 1:
			rsp.Status = MADStatusNoIOC
		default:
			s := SRPTServiceEntries(r.ServiceID)
			s.AppendTo(rsp.Data[:0])
		}
	default:
		rsp.Status = MADStatusUnsupMethodAttr
	}
	return rsp
}
