package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/srp/initiator"
)

// multipathFastIOFail is the fast_io_fail_tmo of each path when srpctl is
// given several targets and no --fast-io-fail-tmo: a lost path gives its
// commands up quickly so they move to another gateway.
const multipathFastIOFail = time.Second

// withMultipath logs in to every target (gateways presenting the same LU),
// joins the sessions in an initiator.Multipath, runs fn on a conn whose I/O
// goes through it (runIO) and logs out. tune adjusts each target's options.
func (tf *targetFlags) withMultipath(ctx context.Context, targets []string, tune func(*initiator.Options), fn func(context.Context, *conn) error) error {
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var conns []*conn
	defer func() {
		for _, c := range conns {
			c.dev.Close()
		}
	}()
	var sessions []*initiator.Session
	for _, t := range targets {
		o, err := tf.options(t)
		if err != nil {
			return err
		}
		if tf.fastIOFail == 0 {
			o.FastIOFailTmo = multipathFastIOFail
		}
		if tune != nil {
			tune(&o)
		}
		c, err := tf.connectOptions(ctx, o)
		if err != nil {
			for _, s := range sessions {
				s.Close()
			}
			return fmt.Errorf("%s: %w", t, err)
		}
		conns = append(conns, c)
		sessions = append(sessions, c.Session)
	}
	m, err := initiator.NewMultipath(ctx, sessions, targets, initiator.LUN(tf.lun), initiator.MultipathOptions{Logger: tf.logger()})
	if err != nil {
		for _, s := range sessions {
			s.Close()
		}
		return err
	}
	defer m.Close()
	c := *conns[0]
	c.mp = m
	return fn(ctx, &c)
}

// ioBuf is a command's data buffer: registered with the session, or plain
// memory for multipath I/O (any path may carry the command).
type ioBuf interface {
	Bytes() []byte
	Release() error
}

type plainBuf []byte

func (b plainBuf) Bytes() []byte  { return b }
func (b plainBuf) Release() error { return nil }

// ioBuffer returns an n-byte buffer for data-in (in) or data-out commands.
func (c *conn) ioBuffer(n int, in bool) (ioBuf, error) {
	if c.mp != nil {
		return plainBuf(make([]byte, n)), nil
	}
	return c.NewBuffer(n, in)
}

// ioCommand builds a command on c's LUN moving n bytes of b.
func (c *conn) ioCommand(cdb []byte, b ioBuf, n int, write bool) initiator.Command {
	cmd := initiator.Command{LUN: c.lun, CDB: cdb}
	switch rb := b.(type) {
	case *initiator.Buffer:
		cmd.Buffer, cmd.Length = rb, n
	default:
		if write {
			cmd.DataOut = [][]byte{b.Bytes()[:n]}
		} else {
			cmd.DataIn = [][]byte{b.Bytes()[:n]}
		}
	}
	return cmd
}

// runIO runs cmd through the multipath when there is one, else the session.
func (c *conn) runIO(ctx context.Context, cmd *initiator.Command) (initiator.Result, error) {
	if c.mp != nil {
		return c.mp.Run(ctx, cmd)
	}
	return c.Run(ctx, cmd)
}

// sessionGone reports an error after which no command can succeed.
func sessionGone(err error) bool {
	return errors.Is(err, initiator.ErrDevLoss) || errors.Is(err, initiator.ErrClosed) || errors.Is(err, initiator.ErrNoPath)
}
