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

// dialPaths logs in to every target (gateways presenting the same LUs) with
// tf's settings and tune; with several targets, a short fast_io_fail_tmo
// unless one was given. The caller closes the conns.
func (tf *targetFlags) dialPaths(ctx context.Context, targets []string, tune func(*initiator.Options)) ([]*conn, error) {
	var conns []*conn
	for _, t := range targets {
		o, err := tf.options(t)
		if err == nil {
			if tf.fastIOFail == 0 && len(targets) > 1 {
				o.FastIOFailTmo = multipathFastIOFail
			}
			if tune != nil {
				tune(&o)
			}
			var c *conn
			if c, err = tf.connectOptions(ctx, o); err == nil {
				conns = append(conns, c)
				continue
			}
		}
		for _, c := range conns {
			c.Close()
		}
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	return conns, nil
}

// multipath joins the conns' sessions for LUN lun.
func (tf *targetFlags) multipath(ctx context.Context, conns []*conn, targets []string, lun uint64) (*initiator.Multipath, error) {
	sessions := make([]*initiator.Session, len(conns))
	for i, c := range conns {
		sessions[i] = c.Session
	}
	return initiator.NewMultipath(ctx, sessions, targets, lun, initiator.MultipathOptions{Logger: tf.logger()})
}

// withMultipath logs in to every target, joins the sessions in an
// initiator.Multipath for tf's LUN, runs fn on a conn whose I/O goes through
// it (runIO) and logs out. tune adjusts each target's options.
func (tf *targetFlags) withMultipath(ctx context.Context, targets []string, tune func(*initiator.Options), fn func(context.Context, *conn) error) error {
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	conns, err := tf.dialPaths(ctx, targets, tune)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	m, err := tf.multipath(ctx, conns, targets, initiator.LUN(tf.lun))
	if err != nil {
		return tf.explainLUN(ctx, conns[0].Session, err)
	}
	defer m.Close()
	c := *conns[0]
	c.mp = m
	return tf.explainLUN(ctx, c.Session, fn(ctx, &c))
}

// mpRW16 moves buf at lba with READ(16) or WRITE(16) through m.
func mpRW16(ctx context.Context, m *initiator.Multipath, write bool, lun, lba uint64, buf []byte, bs int, fua bool) error {
	cdb := make([]byte, 16)
	initiator.PutRW16(cdb, write, lba, uint32(len(buf)/bs), fua)
	cmd := initiator.Command{LUN: lun, CDB: cdb}
	if write {
		cmd.DataOut = [][]byte{buf}
	} else {
		cmd.DataIn = [][]byte{buf}
	}
	res, err := m.Run(ctx, &cmd)
	if err == nil && !write && res.DataInLen != len(buf) {
		err = fmt.Errorf("READ(16): %d of %d bytes transferred", res.DataInLen, len(buf))
	}
	return err
}

// mpSyncCache sends SYNCHRONIZE CACHE(10) for the whole LUN through m.
func mpSyncCache(ctx context.Context, m *initiator.Multipath, lun uint64) error {
	_, err := m.Run(ctx, &initiator.Command{LUN: lun, CDB: []byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}})
	return err
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
