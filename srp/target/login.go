package target

import (
	"encoding/binary"

	"github.com/gosrp/gosrp/srp"
)

// loginResponse encodes the SRP_LOGIN_RSP (ib_srpt values: max_it_iu_len =
// max_req_size, max_ti_iu_len = echo of req_it_iu_len, buf_fmt DIRECT |
// INDIRECT, req_lim_delta = receive ring size).
func (c *channel) loginResponse(tag uint64, flags srp.LoginRspFlags) []byte {
	b, _ := (&srp.LoginResponse{
		ReqLimDelta: uint32(c.cfg.RQSize),
		Tag:         tag,
		MaxITIULen:  uint32(c.cfg.MaxReqSize),
		MaxTIIULen:  uint32(c.maxTI),
		BufFmt:      srp.BufFmtDirect | srp.BufFmtIndirect,
		RspFlags:    flags,
	}).Marshal()
	return b
}

// onLoginIU handles the first IU of a connection accepted without private
// data: it must be a 64-byte SRP_LOGIN_REQ, answered with an SRP_LOGIN_RSP
// or an SRP_LOGIN_REJ (then the channel closes) in a SEND.
func (c *channel) onLoginIU(slot int) {
	b := c.iu(slot)
	var reason srp.RejectReason
	var tag uint64
	lr, err := srp.UnmarshalLoginRequest(b)
	var pl *pendingLogin
	if err != nil {
		c.log.Warn("first IU is not a login", "err", err)
		reason = srp.RejUnableEstablishChannel
		if len(b) >= 16 {
			tag = binary.BigEndian.Uint64(b[8:16])
		}
	} else {
		tag = lr.Tag
		pl, reason = c.port.prepareLogin(lr, c.conn.RemoteAddr(), c, c.log)
	}
	i := c.cfg.RQSize + sendLogout
	if reason != 0 {
		if lr != nil {
			c.log.Info("login rejected", c.port.rejectAttrs(lr, reason)...)
		} else {
			c.log.Info("login rejected", "reason", reason)
		}
		iu := rejectIU(tag, reason)
		n := copy(c.sendSlot(i), iu)
		c.transition(evLogout)
		c.pendClose = true
		c.queueSend(i, n, false, wrRec{kind: wrLogout, send: -1}, c.ctxWRs(i))
		c.armLogoutTimer()
		return
	}
	c.port.mu.Lock()
	pl.attachLocked(c)
	c.port.mu.Unlock()
	c.maxTI = int(lr.ReqITIULen)
	c.loginFlags = lr.ReqFlags
	c.immOffset = pl.immOffset
	if c.immOffset > 0 && c.immOffset != srp.DefaultImmDataOffset {
		c.log.Debug("immediate data will not be 512-byte aligned (receive ring set up before the login)", "offset", c.immOffset)
	}
	rsp := c.loginResponse(lr.Tag, pl.rspFlags)
	n := copy(c.sendSlot(i), rsp)
	c.queueSend(i, n, false, wrRec{kind: wrWrites, send: -1}, c.ctxWRs(i))
	c.postRecv(slot)
	c.port.closeTerminated(pl)
	c.transition(evEstablished)
}

func (c *channel) armLogoutTimer() {
	c.cfg.Clock.AfterFunc(c.cfg.LogoutTimeout, func() {
		select {
		case c.events <- event{tick: true}:
		case <-c.done:
		}
	})
}
