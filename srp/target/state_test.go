package target

import "testing"

// TestStepForwardOnly drives every (state, event) pair: the state never
// moves backward, and the documented transitions carry their effects.
func TestStepForwardOnly(t *testing.T) {
	events := []chanEvent{evEstablished, evClose, evConnDown, evDrained, evLogout, evLogoutSent}
	for s := stateConnecting; s <= stateDisconnected; s++ {
		for _, ev := range events {
			next, _ := step(s, ev)
			if next < s {
				t.Errorf("%v --%v--> %v moves backward", s, ev, next)
			}
		}
	}
	type tr struct {
		s    chanState
		ev   chanEvent
		next chanState
		eff  chanEffect
	}
	for _, c := range []tr{
		{stateConnecting, evEstablished, stateLive, effRunWaitList},
		{stateLive, evEstablished, stateLive, 0},
		{stateLive, evClose, stateDisconnecting, effDisconnect | effAbortCommands},
		{stateLive, evLogout, stateDisconnecting, effAbortCommands},
		{stateDisconnecting, evLogoutSent, stateDisconnecting, effDisconnect},
		{stateDisconnecting, evConnDown, stateDraining, 0},
		{stateLive, evConnDown, stateDraining, effDisconnect | effAbortCommands},
		{stateConnecting, evConnDown, stateDraining, effDisconnect | effAbortCommands},
		{stateDraining, evDrained, stateDisconnected, effRelease},
		{stateLive, evDrained, stateLive, 0},
		{stateDisconnected, evClose, stateDisconnected, 0},
		{stateDraining, evClose, stateDraining, 0},
	} {
		next, eff := step(c.s, c.ev)
		if next != c.next || eff != c.eff {
			t.Errorf("%v --%v--> %v eff %b, want %v eff %b", c.s, c.ev, next, eff, c.next, c.eff)
		}
	}
}

// TestCredits follows T10 SRP r16a §5.5.2 accounting through a sequence.
func TestCreditsPure(t *testing.T) {
	c := newCredits(2)
	for i := range 2 {
		if !c.request() {
			t.Fatalf("initial credit %d of 2 refused", i+1)
		}
	}
	if c.request() {
		t.Fatal("third request accepted with req_lim 0")
	}
	if c.overdrawn != 1 {
		t.Fatalf("overdrawn %d", c.overdrawn)
	}
	c.release() // an aborted command
	if d := c.response(); d != 2 {
		t.Fatalf("delta %d, want 1 + 1 accumulated", d)
	}
	if d := c.response(); d != 1 {
		t.Fatalf("delta %d, want 1", d)
	}
	if d := c.credReq(); d != 0 {
		t.Fatalf("CRED_REQ delta %d with nothing owed", d)
	}
	c.release()
	c.release()
	if d := c.credReq(); d != 3-1 {
		t.Fatalf("CRED_REQ delta %d, want 2", d)
	}
	c.undo(2)
	if c.owed != 2 {
		t.Fatalf("undo: owed %d", c.owed)
	}
}
