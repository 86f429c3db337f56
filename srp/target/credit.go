package target

// credits keeps the SRP request limit of one channel from the target's side
// (T10 SRP r16a §5.5.2, "request limit"). It is a pure value; the channel
// driver owns it.
//
// The initiator may have at most reqLim SRP_CMD / SRP_TSK_MGMT requests
// outstanding. Each such IU spends one credit; every SRP_RSP hands back
// 1 + whatever accumulated (Linux ib_srpt: req_lim_delta = 1 +
// xchg(ch->req_lim_delta, 0)); a request that ends without a response (an
// aborted command, a request refused before any response) adds its credit to
// the accumulated delta, which the next SRP_RSP or an SRP_CRED_REQ carries.
type credits struct {
	// held is how many credits the initiator holds as far as we know: the
	// initial req_lim_delta of the LOGIN_RSP plus every delta sent, minus
	// every request received.
	held int
	// owed is the credit accumulated for the initiator and not yet sent.
	owed int
	// overdrawn counts requests that arrived while held was 0.
	overdrawn int
}

// newCredits starts the accounting at the LOGIN_RSP's req_lim_delta.
func newCredits(initial int) credits { return credits{held: initial} }

// request records one SRP_CMD or SRP_TSK_MGMT. It reports false when the
// initiator had no credit left (a protocol violation the caller logs).
func (c *credits) request() bool {
	if c.held <= 0 {
		c.overdrawn++
		return false
	}
	c.held--
	return true
}

// response returns the req_lim_delta for an SRP_RSP that completes one
// request: 1 plus the accumulated credit, which is cleared.
func (c *credits) response() int32 {
	d := 1 + c.owed
	c.owed = 0
	c.held += d
	return int32(d)
}

// release accumulates the credit of a request that ends without a response.
func (c *credits) release() { c.owed++ }

// credReq returns the req_lim_delta for an SRP_CRED_REQ carrying all the
// accumulated credit, and clears it. It returns 0 when nothing is owed.
func (c *credits) credReq() int32 {
	d := c.owed
	c.owed = 0
	c.held += d
	return int32(d)
}

// undo gives back a delta whose IU could not be sent.
func (c *credits) undo(delta int32) {
	c.held -= int(delta)
	c.owed += int(delta)
}
