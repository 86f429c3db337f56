package main

import (
	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/scsi"
)

// PortGroups reports the target port groups (GET /alua).
func (d *daemon) PortGroups() []adminapi.PortGroup {
	local := uint16(0)
	if d.cfg.ALUA != nil {
		local = d.cfg.ALUA.Group
	}
	out := []adminapi.PortGroup{}
	for _, pg := range d.core.PortGroups() {
		out = append(out, adminapi.PortGroup{Group: pg.ID, State: pg.State.String(), Preferred: pg.Preferred, Ports: pg.Ports, Local: pg.ID == local})
	}
	return out
}

// SetALUAState changes a target port group's asymmetric access state at run
// time (PUT /alua/{group}); `srpctl target save` keeps it. Errors: an
// unknown state (a bad request) or group (not found).
func (d *daemon) SetALUAState(group uint16, state string) error {
	st, err := scsi.ParseALUAState(state)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.core.SetPortGroupState(group, st); err != nil {
		return notFoundf("%v", err)
	}
	if d.cfg.ALUA == nil {
		d.cfg.ALUA = &ALUASection{}
	}
	a := d.cfg.ALUA
	if group == a.Group {
		a.State = st.String()
		return nil
	}
	for i := range a.Peers {
		if a.Peers[i].Group == group {
			a.Peers[i].State = st.String()
			return nil
		}
	}
	return nil
}
