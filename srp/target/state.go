package target

import "fmt"

// chanState is the life cycle state of an RDMA channel. It only moves
// forward. The states are those of Linux ib_srpt (enum rdma_ch_state).
type chanState uint8

const (
	// stateConnecting: the connection request was accepted (or the login IU
	// is awaited); IUs that arrive are queued until the channel is live.
	stateConnecting chanState = iota
	// stateLive: the login completed; IUs are processed as they arrive.
	stateLive
	// stateDisconnecting: a local or remote close began; no new IUs are
	// started, the connection is being torn down.
	stateDisconnecting
	// stateDraining: the connection is down; outstanding work requests are
	// flushing and started commands are finishing.
	stateDraining
	// stateDisconnected: everything has flushed and finished; the channel's
	// rings and buffers are released.
	stateDisconnected
)

func (s chanState) String() string {
	switch s {
	case stateConnecting:
		return "CONNECTING"
	case stateLive:
		return "LIVE"
	case stateDisconnecting:
		return "DISCONNECTING"
	case stateDraining:
		return "DRAINING"
	case stateDisconnected:
		return "DISCONNECTED"
	}
	return fmt.Sprintf("chanState(%d)", uint8(s))
}

// chanEvent is an input of the channel state machine.
type chanEvent uint8

const (
	// evEstablished: the login completed and the channel may run IUs.
	evEstablished chanEvent = iota
	// evClose: a local close was asked for (logout, admin, SINGLE login of
	// the same I_T nexus, port disable, shutdown).
	evClose
	// evConnDown: the connection went down (peer disconnect, transport
	// error, or our own close took effect).
	evConnDown
	// evDrained: every posted work request completed or flushed and every
	// started command finished.
	evDrained
	// evLogout: a local close that first tells the initiator why (an
	// SRP_T_LOGOUT, or the SRP_LOGIN_REJ of an IU-form login) in a SEND.
	evLogout
	// evLogoutSent: that SEND completed (or timed out); disconnect now.
	evLogoutSent
)

func (e chanEvent) String() string {
	switch e {
	case evEstablished:
		return "established"
	case evClose:
		return "close"
	case evConnDown:
		return "conn-down"
	case evDrained:
		return "drained"
	case evLogout:
		return "logout"
	case evLogoutSent:
		return "logout-sent"
	}
	return fmt.Sprintf("chanEvent(%d)", uint8(e))
}

// chanEffect is a set of actions the driver performs after a transition.
type chanEffect uint8

const (
	// effRunWaitList: replay the IUs queued while CONNECTING, in order.
	effRunWaitList chanEffect = 1 << iota
	// effDisconnect: tear the connection down (Conn.Close: disconnect and
	// flush the queue pair).
	effDisconnect
	// effAbortCommands: cancel every command still in the SCSI core and
	// stop starting new work.
	effAbortCommands
	// effRelease: free the rings and buffers and drop the I_T nexus
	// reference.
	effRelease
)

// step is the pure channel state machine: given the current state and an
// event it returns the next state and the effects to carry out. Events that
// do not apply to a state leave it unchanged with no effects, so the state
// never moves backward. Modelled on ib_srpt's srpt_set_ch_state /
// srpt_close_ch / srpt_release_channel_work sequence.
func step(s chanState, ev chanEvent) (chanState, chanEffect) {
	switch ev {
	case evEstablished:
		if s == stateConnecting {
			return stateLive, effRunWaitList
		}
	case evClose:
		if s == stateConnecting || s == stateLive {
			return stateDisconnecting, effDisconnect | effAbortCommands
		}
	case evLogout:
		if s == stateConnecting || s == stateLive {
			return stateDisconnecting, effAbortCommands
		}
	case evLogoutSent:
		if s == stateDisconnecting {
			return stateDisconnecting, effDisconnect
		}
	case evConnDown:
		switch s {
		case stateConnecting, stateLive:
			return stateDraining, effDisconnect | effAbortCommands
		case stateDisconnecting:
			return stateDraining, 0
		}
	case evDrained:
		if s == stateDraining {
			return stateDisconnected, effRelease
		}
	}
	return s, 0
}
