package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// explainLoginReject adds to a rejected login the numbers the user needs:
// for an IU length the target refuses (LOGIN_REJ 0x10002), the largest it
// accepts, found by logging in with smaller ones, as the max_it_iu_size to
// add to the target string; for a missing ACL (0x10006, which ib_srpt
// and srptd also use for a full channel limit), this initiator's port ID,
// srptd's demo_mode that admits everyone, and the srpctl target acl add
// line that admits this initiator, unless a channel after the first was
// refused: the target admitted the first, so its channel limit was met.
// Other errors are returned as they are.
func explainLoginReject(ctx context.Context, dev rdma.Device, o initiator.Options, timeout time.Duration, err error) error {
	var rej *initiator.LoginRejectError
	if !errors.As(err, &rej) {
		return err
	}
	switch rej.Reason {
	case srp.RejReqITIULenTooLarge:
		n, perr := probeMaxITIU(ctx, dev, o, timeout)
		if n > 0 {
			err = fmt.Errorf("%w\nthe target accepts initiator-to-target IUs of up to %d bytes (this login asked for %d): add max_it_iu_size=%d to the target string", err, n, o.ReqITIULen(), n)
		}
		if perr != nil {
			// A smaller IU met another refusal (no ACL): say that too.
			err = fmt.Errorf("%w\nwith a smaller IU: %w", err, explainLoginReject(ctx, dev, o, timeout, perr))
		}
		return err
	case srp.RejChannelLimitReached:
		if rej.Channel > 0 {
			// Channel 0 logged in, so the target admits this initiator:
			// the limit is its channels per I_T nexus, not an ACL.
			return fmt.Errorf("%w\nthe target admitted %d channel(s) of this session and refused the next: it allows no more per I_T nexus (srptd: max_channels in [target], 16 by default; channels other sessions of this initiator port hold count too); lower ch_count (bench: --channels) to %d or less", err, rej.Channel, rej.Channel)
		}
		ipi, _ := o.PortIDs()
		return fmt.Errorf("%w\nthis initiator's port ID is 0x%x; if the target has no ACL for it, admit every initiator with demo_mode = true in the [target] section of srptd's configuration (or srptd --demo), or this one, on the target's host, with:\n  srpctl target acl add 0x%x", err, ipi, ipi)
	}
	return err
}

// probeMaxITIU finds the largest req_it_iu_len below o's that the target
// accepts, by binary search over logins of one channel that join the
// I_T nexus (so they disturb no other session) and log out at once. It
// returns 0 when no length from 64 bytes up is accepted, and the error of
// a probe that failed for another reason than the IU length.
func probeMaxITIU(ctx context.Context, dev rdma.Device, o initiator.Options, timeout time.Duration) (int, error) {
	lo, hi := 0, o.ReqITIULen()-1 // lo: largest accepted so far
	for l := 64; l <= hi; {
		m := l + (hi-l+1)/2
		if lo == 0 {
			m = l // first make sure the smallest length logs in at all
		}
		p := o
		p.MaxITIUSize, p.ChCount, p.JoinNexus, p.ReconnectDelay = m, 1, true, -1
		lctx, cancel := context.WithTimeout(ctx, timeout)
		s, err := initiator.Dial(lctx, dev, p)
		cancel()
		var rej *initiator.LoginRejectError
		switch {
		case err == nil:
			s.Close()
			lo, l = m, m+1
		case errors.As(err, &rej) && rej.Reason == srp.RejReqITIULenTooLarge:
			if lo == 0 {
				return 0, nil
			}
			hi = m - 1
		default:
			return lo, err
		}
	}
	return lo, nil
}
