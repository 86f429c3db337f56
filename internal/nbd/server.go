package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
)

// Device is what an export reads and writes. Offsets and lengths are
// bytes, within the export's Size and multiples of its BlockSize unless the
// client ignored the advertised block size (then the Device may return
// EINVAL, or handle them). Methods are called concurrently, from every
// connection (the export advertises NBD_FLAG_CAN_MULTI_CONN: a Flush makes
// every write completed before it durable, whichever connection sent it).
type Device interface {
	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at off; fua: durable before it returns.
	WriteAt(ctx context.Context, p []byte, off int64, fua bool) error
	// Flush makes every completed write durable.
	Flush(ctx context.Context) error
}

// Trimmer is a Device that can deallocate (NBD_CMD_TRIM, advisory).
type Trimmer interface {
	Trim(ctx context.Context, off, n int64, fua bool) error
}

// Zeroer is a Device that writes zeroes without a data buffer
// (NBD_CMD_WRITE_ZEROES); mayTrim: the zeroed range may be deallocated
// (the client did not set NBD_CMD_FLAG_NO_HOLE).
type Zeroer interface {
	WriteZeroes(ctx context.Context, off, n int64, mayTrim, fua bool) error
}

// Export is one named block device.
type Export struct {
	Name        string // "" is not a name: the default export is Server.Default
	Description string
	Size        int64  // bytes
	BlockSize   uint32 // minimum and preferred I/O size, bytes (a power of two)
	MaxPayload  uint32 // largest READ or WRITE, bytes (a multiple of BlockSize)
	ReadOnly    bool
	Dev         Device
}

// flags are the export's transmission flags.
func (e *Export) flags() uint16 {
	f := uint16(tflagHasFlags | tflagSendFlush | tflagSendFUA | tflagCanMultiConn)
	if e.ReadOnly {
		f |= tflagReadOnly
	}
	if _, ok := e.Dev.(Trimmer); ok && !e.ReadOnly {
		f |= tflagSendTrim
	}
	if _, ok := e.Dev.(Zeroer); ok && !e.ReadOnly {
		f |= tflagSendWriteZeroes
	}
	return f
}

// Server serves exports to NBD clients.
type Server struct {
	// Exports are the exports by name.
	Exports map[string]*Export
	// Default names the export a client gets for the empty name.
	Default string
	// MaxInFlight bounds the requests one connection has in progress
	// (0: 64); further requests wait to be read.
	MaxInFlight int
	// Logger receives connection events; nil discards.
	Logger *slog.Logger
}

func (s *Server) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Serve accepts connections on l until ctx ends or l fails, serving each
// on its own goroutine; it closes l and waits for the connections, which
// end when ctx does.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			l.Close()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ServeConn(ctx, c); err != nil {
				s.log().Warn("nbd connection ended", "remote", c.RemoteAddr(), "err", err)
			}
		}()
	}
}

// errAbort ends a handshake the client aborted (NBD_OPT_ABORT).
var errAbort = errors.New("client aborted the handshake")

// ServeConn runs the handshake and the transmission phase on c, and closes
// it. It returns nil when the client disconnects (NBD_CMD_DISC, or closing
// the connection between requests), or ctx ends.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) error {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	r := bufio.NewReaderSize(c, 64<<10)
	e, err := s.handshake(r, c)
	if err != nil {
		if errors.Is(err, errAbort) || ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("handshake: %w", err)
	}
	s.log().Debug("nbd client connected", "remote", c.RemoteAddr(), "export", e.Name)
	err = s.transmit(ctx, r, c, e)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// handshake runs the fixed newstyle negotiation (proto.md "Fixed newstyle
// negotiation") and returns the export the client chose with
// NBD_OPT_EXPORT_NAME or NBD_OPT_GO.
func (s *Server) handshake(r *bufio.Reader, w io.Writer) (*Export, error) {
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], magicNBD)
	binary.BigEndian.PutUint64(hello[8:], magicIHaveOpt)
	binary.BigEndian.PutUint16(hello[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := w.Write(hello[:]); err != nil {
		return nil, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(r, cf[:]); err != nil {
		return nil, err
	}
	clientFlags := binary.BigEndian.Uint32(cf[:])
	if clientFlags&^(clientFixedNewstyle|clientNoZeroes) != 0 {
		return nil, fmt.Errorf("unknown client flags %#x", clientFlags)
	}
	noZeroes := clientFlags&clientNoZeroes != 0
	for {
		var h [16]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil, err
		}
		if m := binary.BigEndian.Uint64(h[0:]); m != magicIHaveOpt {
			return nil, fmt.Errorf("option magic %#x, want IHAVEOPT", m)
		}
		opt, n := binary.BigEndian.Uint32(h[8:]), binary.BigEndian.Uint32(h[12:])
		if n > maxOptionLength {
			// Too long to read into memory: skip it and refuse.
			if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
				return nil, err
			}
			if err := optReply(w, opt, repErrTooBig, nil); err != nil {
				return nil, err
			}
			continue
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, err
		}
		switch opt {
		case optExportName:
			e := s.export(string(data))
			if e == nil {
				return nil, fmt.Errorf("NBD_OPT_EXPORT_NAME %q: no such export", data)
			}
			b := make([]byte, 10, 10+124)
			binary.BigEndian.PutUint64(b[0:], uint64(e.Size))
			binary.BigEndian.PutUint16(b[8:], e.flags())
			if !noZeroes {
				b = b[:10+124]
			}
			_, err := w.Write(b)
			return e, err
		case optAbort:
			_ = optReply(w, opt, repAck, nil)
			return nil, errAbort
		case optList:
			if n != 0 {
				if err := optReply(w, opt, repErrInvalid, nil); err != nil {
					return nil, err
				}
				continue
			}
			for _, name := range s.names() {
				b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
				b = append(b, name...)
				b = append(b, s.Exports[name].Description...)
				if err := optReply(w, opt, repServer, b); err != nil {
					return nil, err
				}
			}
			if err := optReply(w, opt, repAck, nil); err != nil {
				return nil, err
			}
		case optInfo, optGo:
			e, reqs, rep := s.parseInfo(data)
			if rep != 0 {
				if err := optReply(w, opt, rep, nil); err != nil {
					return nil, err
				}
				continue
			}
			if err := s.infoReplies(w, opt, e, reqs); err != nil {
				return nil, err
			}
			if err := optReply(w, opt, repAck, nil); err != nil {
				return nil, err
			}
			if opt == optGo {
				return e, nil
			}
		case optStartTLS:
			if err := optReply(w, opt, repErrPolicy, nil); err != nil {
				return nil, err
			}
		default:
			// NBD_OPT_STRUCTURED_REPLY, meta contexts and the rest: simple
			// replies only.
			if err := optReply(w, opt, repErrUnsup, nil); err != nil {
				return nil, err
			}
		}
	}
}

// names returns the export names, sorted.
func (s *Server) names() []string { return slices.Sorted(maps.Keys(s.Exports)) }

// export returns the export name selects ("" the default), or nil.
func (s *Server) export(name string) *Export {
	if name == "" {
		name = s.Default
	}
	return s.Exports[name]
}

// parseInfo decodes NBD_OPT_INFO/GO data (32-bit name length, name, 16-bit
// count, 16-bit info types) and finds the export; rep is the error reply
// to send instead (0: none).
func (s *Server) parseInfo(data []byte) (*Export, []uint16, uint32) {
	if len(data) < 4 {
		return nil, nil, repErrInvalid
	}
	nl := binary.BigEndian.Uint32(data)
	if uint64(nl)+6 > uint64(len(data)) {
		return nil, nil, repErrInvalid
	}
	name := string(data[4 : 4+nl])
	rest := data[4+nl:]
	cnt := int(binary.BigEndian.Uint16(rest))
	if len(rest) != 2+2*cnt {
		return nil, nil, repErrInvalid
	}
	reqs := make([]uint16, cnt)
	for i := range reqs {
		reqs[i] = binary.BigEndian.Uint16(rest[2+2*i:])
	}
	e := s.export(name)
	if e == nil {
		return nil, nil, repErrUnknown
	}
	return e, reqs, 0
}

// infoReplies sends NBD_REP_INFO for the export (always) and for the
// name, description and block size (always too: the block size tells
// clients to keep requests aligned).
func (s *Server) infoReplies(w io.Writer, opt uint32, e *Export, reqs []uint16) error {
	b := binary.BigEndian.AppendUint16(nil, infoExport)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Size))
	b = binary.BigEndian.AppendUint16(b, e.flags())
	if err := optReply(w, opt, repInfo, b); err != nil {
		return err
	}
	b = binary.BigEndian.AppendUint16(nil, infoBlockSize)
	b = binary.BigEndian.AppendUint32(b, e.BlockSize)
	b = binary.BigEndian.AppendUint32(b, e.BlockSize)
	b = binary.BigEndian.AppendUint32(b, e.MaxPayload)
	if err := optReply(w, opt, repInfo, b); err != nil {
		return err
	}
	for _, r := range reqs {
		switch r {
		case infoName:
			if err := optReply(w, opt, repInfo, append(binary.BigEndian.AppendUint16(nil, infoName), e.Name...)); err != nil {
				return err
			}
		case infoDesc:
			if err := optReply(w, opt, repInfo, append(binary.BigEndian.AppendUint16(nil, infoDesc), e.Description...)); err != nil {
				return err
			}
		}
	}
	return nil
}

// optReply sends one option reply.
func optReply(w io.Writer, opt, typ uint32, data []byte) error {
	b := make([]byte, 20, 20+len(data))
	binary.BigEndian.PutUint64(b[0:], magicOptReply)
	binary.BigEndian.PutUint32(b[8:], opt)
	binary.BigEndian.PutUint32(b[12:], typ)
	binary.BigEndian.PutUint32(b[16:], uint32(len(data)))
	_, err := w.Write(append(b, data...))
	return err
}

// request is one transmission request.
type request struct {
	flags, typ uint16
	handle     uint64
	off        uint64
	length     uint32
	data       []byte // WRITE payload
}

// transmit serves requests until NBD_CMD_DISC, EOF or an error; each
// request runs on its own goroutine (at most MaxInFlight at once) and its
// reply is written whole under a lock.
func (s *Server) transmit(ctx context.Context, r *bufio.Reader, c net.Conn, e *Export) error {
	maxIn := s.MaxInFlight
	if maxIn <= 0 {
		maxIn = 64
	}
	sem := make(chan struct{}, maxIn)
	var wg sync.WaitGroup
	defer wg.Wait()
	var wmu sync.Mutex
	reply := func(handle uint64, errno Errno, data []byte) {
		var h [16]byte
		binary.BigEndian.PutUint32(h[0:], magicSimpleRep)
		binary.BigEndian.PutUint32(h[4:], uint32(errno))
		binary.BigEndian.PutUint64(h[8:], handle)
		wmu.Lock()
		defer wmu.Unlock()
		bufs := net.Buffers{h[:]}
		if errno == 0 && len(data) > 0 {
			bufs = append(bufs, data)
		}
		_, _ = bufs.WriteTo(c)
	}
	for {
		var h [28]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m := binary.BigEndian.Uint32(h[0:]); m != magicRequest {
			return fmt.Errorf("request magic %#x", m)
		}
		rq := request{
			flags: binary.BigEndian.Uint16(h[4:]), typ: binary.BigEndian.Uint16(h[6:]),
			handle: binary.BigEndian.Uint64(h[8:]), off: binary.BigEndian.Uint64(h[16:]), length: binary.BigEndian.Uint32(h[24:]),
		}
		if rq.typ == cmdDisc {
			return nil // the deferred wg.Wait lets requests in flight finish
		}
		if rq.typ == cmdWrite {
			if rq.length > e.MaxPayload {
				// The payload cannot be skipped safely at any size; a
				// client that ignores the advertised maximum is cut off.
				return fmt.Errorf("WRITE of %d bytes, more than the %d-byte maximum", rq.length, e.MaxPayload)
			}
			rq.data = make([]byte, rq.length)
			if _, err := io.ReadFull(r, rq.data); err != nil {
				return err
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data, errno := s.do(ctx, e, &rq)
			reply(rq.handle, errno, data)
		}()
	}
}

// do runs one request and returns the READ data and the error value.
func (s *Server) do(ctx context.Context, e *Export, rq *request) ([]byte, Errno) {
	end := rq.off + uint64(rq.length)
	if end < rq.off {
		return nil, EINVAL
	}
	known := uint16(cmdFlagFUA)
	if rq.typ == cmdWriteZeroes {
		known |= cmdFlagNoHole
	}
	if rq.flags&^known != 0 {
		return nil, EINVAL
	}
	fua := rq.flags&cmdFlagFUA != 0
	write := rq.typ == cmdWrite || rq.typ == cmdTrim || rq.typ == cmdWriteZeroes
	if write && e.ReadOnly {
		return nil, EPERM
	}
	if rq.typ != cmdFlush && end > uint64(e.Size) {
		if write {
			return nil, ENOSPC
		}
		return nil, EINVAL
	}
	switch rq.typ {
	case cmdRead:
		if rq.length > e.MaxPayload {
			return nil, EOVERFLOW
		}
		buf := make([]byte, rq.length)
		if err := e.Dev.ReadAt(ctx, buf, int64(rq.off)); err != nil {
			return nil, errnoOf(err)
		}
		return buf, 0
	case cmdWrite:
		return nil, errnoOf(e.Dev.WriteAt(ctx, rq.data, int64(rq.off), fua))
	case cmdFlush:
		return nil, errnoOf(e.Dev.Flush(ctx))
	case cmdTrim:
		t, ok := e.Dev.(Trimmer)
		if !ok {
			return nil, EINVAL
		}
		return nil, errnoOf(t.Trim(ctx, int64(rq.off), int64(rq.length), fua))
	case cmdWriteZeroes:
		z, ok := e.Dev.(Zeroer)
		if !ok {
			return nil, EINVAL
		}
		return nil, errnoOf(z.WriteZeroes(ctx, int64(rq.off), int64(rq.length), rq.flags&cmdFlagNoHole == 0, fua))
	}
	return nil, EINVAL
}

// errnoOf maps a Device error to its NBD error value: an Errno it wraps,
// else EIO.
func errnoOf(err error) Errno {
	if err == nil {
		return 0
	}
	var e Errno
	if errors.As(err, &e) {
		return e
	}
	return EIO
}
