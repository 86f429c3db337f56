package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// memDevice is a Device in memory that records flushes, trims and zeroes.
type memDevice struct {
	mu      sync.Mutex
	b       []byte
	flushes int
	trims   [][2]int64
	zeroes  []bool // mayTrim of each WriteZeroes
	fuas    int
}

func (m *memDevice) ReadAt(_ context.Context, p []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(p, m.b[off:])
	return nil
}

func (m *memDevice) WriteAt(_ context.Context, p []byte, off int64, fua bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bytes.HasPrefix(p, []byte("EPERM")) {
		return EPERM
	}
	if bytes.HasPrefix(p, []byte("FAIL")) {
		return errors.New("medium error")
	}
	copy(m.b[off:], p)
	if fua {
		m.fuas++
	}
	return nil
}

func (m *memDevice) Flush(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
	return nil
}

func (m *memDevice) Trim(_ context.Context, off, n int64, fua bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trims = append(m.trims, [2]int64{off, n})
	return nil
}

func (m *memDevice) WriteZeroes(_ context.Context, off, n int64, mayTrim, fua bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.b[off : off+n])
	m.zeroes = append(m.zeroes, mayTrim)
	return nil
}

// client is a minimal NBD client for the tests, written from proto.md.
type client struct {
	t *testing.T
	c net.Conn
}

func dial(t *testing.T, s *Server) *client {
	t.Helper()
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeConn(ctx, b) }()
	t.Cleanup(func() {
		a.Close()
		cancel()
		<-done
	})
	_ = a.SetDeadline(time.Now().Add(20 * time.Second))
	cl := &client{t: t, c: a}
	var hello [18]byte
	cl.read(hello[:])
	if binary.BigEndian.Uint64(hello[0:]) != magicNBD || binary.BigEndian.Uint64(hello[8:]) != magicIHaveOpt || binary.BigEndian.Uint16(hello[16:]) != 3 {
		t.Fatalf("server greeting %x", hello)
	}
	return cl
}

func (cl *client) read(b []byte) {
	cl.t.Helper()
	if _, err := io.ReadFull(cl.c, b); err != nil {
		cl.t.Fatalf("read: %v", err)
	}
}

func (cl *client) write(b []byte) {
	cl.t.Helper()
	if _, err := cl.c.Write(b); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

func (cl *client) option(opt uint32, data []byte) {
	b := binary.BigEndian.AppendUint64(nil, magicIHaveOpt)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	cl.write(append(b, data...))
}

// optReply reads one option reply: the option it answers, its type, data.
func (cl *client) optReply() (uint32, uint32, []byte) {
	cl.t.Helper()
	var h [20]byte
	cl.read(h[:])
	if binary.BigEndian.Uint64(h[0:]) != magicOptReply {
		cl.t.Fatalf("option reply magic %x", h[:8])
	}
	data := make([]byte, binary.BigEndian.Uint32(h[16:]))
	cl.read(data)
	return binary.BigEndian.Uint32(h[8:]), binary.BigEndian.Uint32(h[12:]), data
}

func infoData(name string, reqs ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reqs)))
	for _, r := range reqs {
		b = binary.BigEndian.AppendUint16(b, r)
	}
	return b
}

// request sends one transmission request and returns its reply's error
// and (for a READ) data.
func (cl *client) request(typ, flags uint16, handle, off uint64, length uint32, data []byte) (Errno, []byte) {
	cl.t.Helper()
	cl.send(typ, flags, handle, off, length, data)
	var h [16]byte
	cl.read(h[:])
	if binary.BigEndian.Uint32(h[0:]) != magicSimpleRep || binary.BigEndian.Uint64(h[8:]) != handle {
		cl.t.Fatalf("reply %x to handle %d", h, handle)
	}
	errno := Errno(binary.BigEndian.Uint32(h[4:]))
	var rd []byte
	if typ == cmdRead && errno == 0 {
		rd = make([]byte, length)
		cl.read(rd)
	}
	return errno, rd
}

func (cl *client) send(typ, flags uint16, handle, off uint64, length uint32, data []byte) {
	b := binary.BigEndian.AppendUint32(nil, magicRequest)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, handle)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, length)
	cl.write(append(b, data...))
}

func testServer() (*Server, *memDevice, *memDevice) {
	d0, d1 := &memDevice{b: make([]byte, 1<<20)}, &memDevice{b: make([]byte, 64<<10)}
	return &Server{
		Exports: map[string]*Export{
			"lun0": {Name: "lun0", Description: "LUN 0", Size: 1 << 20, BlockSize: 512, MaxPayload: 256 << 10, Dev: d0},
			"lun1": {Name: "lun1", Size: 64 << 10, BlockSize: 4096, MaxPayload: 64 << 10, ReadOnly: true, Dev: d1},
		},
		Default: "lun0",
	}, d0, d1
}

// TestHandshakeOptions: LIST names every export; INFO answers the size,
// the transmission flags and the block sizes; an unknown export is
// NBD_REP_ERR_UNKNOWN, an unknown option NBD_REP_ERR_UNSUP, malformed INFO
// data NBD_REP_ERR_INVALID; GO with the empty name selects the default.
func TestHandshakeOptions(t *testing.T) {
	s, _, _ := testServer()
	cl := dial(t, s)
	cl.write([]byte{0, 0, 0, 3}) // FIXED_NEWSTYLE | NO_ZEROES

	cl.option(optList, nil)
	var names []string
	for {
		opt, typ, data := cl.optReply()
		if opt != optList {
			t.Fatalf("reply to option %d", opt)
		}
		if typ == repAck {
			break
		}
		if typ != repServer {
			t.Fatalf("LIST reply type %#x", typ)
		}
		n := binary.BigEndian.Uint32(data)
		names = append(names, string(data[4:4+n]))
	}
	if len(names) != 2 || names[0] != "lun0" || names[1] != "lun1" {
		t.Fatalf("LIST %q", names)
	}

	cl.option(optInfo, infoData("lun1", infoName, infoDesc))
	var size uint64
	var flags uint16
	var minBS, maxBS uint32
	var gotName bool
	for {
		_, typ, data := cl.optReply()
		if typ == repAck {
			break
		}
		if typ != repInfo {
			t.Fatalf("INFO reply %#x", typ)
		}
		switch binary.BigEndian.Uint16(data) {
		case infoExport:
			size, flags = binary.BigEndian.Uint64(data[2:]), binary.BigEndian.Uint16(data[10:])
		case infoBlockSize:
			minBS, maxBS = binary.BigEndian.Uint32(data[2:]), binary.BigEndian.Uint32(data[10:])
		case infoName:
			gotName = string(data[2:]) == "lun1"
		}
	}
	want := uint16(tflagHasFlags | tflagReadOnly | tflagSendFlush | tflagSendFUA | tflagCanMultiConn)
	if size != 64<<10 || flags != want || minBS != 4096 || maxBS != 64<<10 || !gotName {
		t.Errorf("INFO lun1: size %d flags %#x (want %#x) block sizes %d..%d name %v", size, flags, want, minBS, maxBS, gotName)
	}

	for _, c := range []struct {
		opt  uint32
		data []byte
		want uint32
	}{
		{optInfo, infoData("lun7"), repErrUnknown},
		{optGo, []byte{0, 0, 0, 9, 'x'}, repErrInvalid},
		{optStructuredRepl, nil, repErrUnsup},
		{optStartTLS, nil, repErrPolicy},
		{99, []byte("whatever"), repErrUnsup},
	} {
		cl.option(c.opt, c.data)
		if opt, typ, _ := cl.optReply(); opt != c.opt || typ != c.want {
			t.Errorf("option %d %x: reply %#x to %d, want %#x", c.opt, c.data, typ, opt, c.want)
		}
	}

	cl.option(optGo, infoData(""))
	for {
		_, typ, data := cl.optReply()
		if typ == repAck {
			break
		}
		if binary.BigEndian.Uint16(data) == infoExport && binary.BigEndian.Uint64(data[2:]) != 1<<20 {
			t.Errorf("GO \"\": size %d, want the default export's", binary.BigEndian.Uint64(data[2:]))
		}
	}
	if e, _ := cl.request(cmdFlush, 0, 1, 0, 0, nil); e != 0 {
		t.Fatalf("FLUSH after GO: %v", e)
	}
}

// TestExportName: NBD_OPT_EXPORT_NAME answers the size, the flags and,
// without NO_ZEROES, 124 zero bytes.
func TestExportName(t *testing.T) {
	s, _, _ := testServer()
	cl := dial(t, s)
	cl.write([]byte{0, 0, 0, 1}) // FIXED_NEWSTYLE only
	cl.option(optExportName, []byte("lun0"))
	b := make([]byte, 10+124)
	cl.read(b)
	want := uint16(tflagHasFlags | tflagSendFlush | tflagSendFUA | tflagSendTrim | tflagSendWriteZeroes | tflagCanMultiConn)
	if binary.BigEndian.Uint64(b) != 1<<20 || binary.BigEndian.Uint16(b[8:]) != want || !bytes.Equal(b[10:], make([]byte, 124)) {
		t.Fatalf("EXPORT_NAME answer %x (flags want %#x)", b, want)
	}
	if e, _ := cl.request(cmdRead, 0, 7, 512, 512, nil); e != 0 {
		t.Fatalf("READ: %v", e)
	}
}

// TestBadClientFlags: unknown client flags end the connection.
func TestBadClientFlags(t *testing.T) {
	s, _, _ := testServer()
	cl := dial(t, s)
	cl.write([]byte{0, 0, 0, 0x83})
	if _, err := cl.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after unknown client flags")
	}
}

func goExport(t *testing.T, s *Server, name string) *client {
	t.Helper()
	cl := dial(t, s)
	cl.write([]byte{0, 0, 0, 3})
	cl.option(optGo, infoData(name))
	for {
		_, typ, _ := cl.optReply()
		if typ == repAck {
			return cl
		}
		if typ != repInfo {
			t.Fatalf("GO %q: reply %#x", name, typ)
		}
	}
}

// TestTransmission: WRITE, READ, FLUSH, TRIM and WRITE_ZEROES reach the
// device with their flags; errors come back as NBD error values: out of
// range (EINVAL for reads, ENOSPC for writes), writes to a read-only export
// (EPERM), unknown commands and flags (EINVAL), device errors (their
// Errno, else EIO); requests are answered by handle, out of order too.
func TestTransmission(t *testing.T) {
	s, d0, _ := testServer()
	cl := goExport(t, s, "lun0")
	data := bytes.Repeat([]byte("gosrp nbd 0123456789abcdef"), 100)[:2048]
	if e, _ := cl.request(cmdWrite, cmdFlagFUA, 1, 4096, uint32(len(data)), data); e != 0 {
		t.Fatalf("WRITE: %v", e)
	}
	if e, got := cl.request(cmdRead, 0, 2, 4096, uint32(len(data)), nil); e != 0 || !bytes.Equal(got, data) {
		t.Fatalf("READ: %v, data equal %v", e, bytes.Equal(got, data))
	}
	if e, _ := cl.request(cmdFlush, 0, 3, 0, 0, nil); e != 0 || d0.flushes != 1 || d0.fuas != 1 {
		t.Fatalf("FLUSH: %v flushes %d fuas %d", e, d0.flushes, d0.fuas)
	}
	if e, _ := cl.request(cmdTrim, 0, 4, 8192, 4096, nil); e != 0 || len(d0.trims) != 1 || d0.trims[0] != [2]int64{8192, 4096} {
		t.Fatalf("TRIM: %v %v", e, d0.trims)
	}
	if e, _ := cl.request(cmdWriteZeroes, cmdFlagNoHole, 5, 4096, 512, nil); e != 0 || len(d0.zeroes) != 1 || d0.zeroes[0] {
		t.Fatalf("WRITE_ZEROES NO_HOLE: %v %v", e, d0.zeroes)
	}
	if e, got := cl.request(cmdRead, 0, 6, 4096, 1024, nil); e != 0 || !bytes.Equal(got[:512], make([]byte, 512)) || !bytes.Equal(got[512:], data[512:1024]) {
		t.Fatalf("READ after WRITE_ZEROES: %v", e)
	}
	for _, c := range []struct {
		name       string
		typ, flags uint16
		off        uint64
		length     uint32
		data       []byte
		want       Errno
	}{
		{"read past the end", cmdRead, 0, 1<<20 - 512, 1024, nil, EINVAL},
		{"write past the end", cmdWrite, 0, 1 << 20, 512, make([]byte, 512), ENOSPC},
		{"offset overflow", cmdRead, 0, ^uint64(0) - 10, 512, nil, EINVAL},
		{"read over the maximum", cmdRead, 0, 0, 512 << 10, nil, EOVERFLOW},
		{"unknown command", 77, 0, 0, 0, nil, EINVAL},
		{"unknown flag", cmdRead, 1 << 9, 0, 512, nil, EINVAL},
		{"NO_HOLE on a write", cmdWrite, cmdFlagNoHole, 0, 5, []byte("hello"), EINVAL},
		{"device Errno", cmdWrite, 0, 0, 5, []byte("EPERM"), EPERM},
		{"device error", cmdWrite, 0, 0, 4, []byte("FAIL"), EIO},
	} {
		if e, _ := cl.request(c.typ, c.flags, 100, c.off, c.length, c.data); e != c.want {
			t.Errorf("%s: %v, want %v", c.name, e, c.want)
		}
	}
	// Several requests in flight: every reply carries its handle.
	for h := uint64(200); h < 216; h++ {
		cl.send(cmdRead, 0, h, 512*h, 512, nil)
	}
	seen := map[uint64]bool{}
	for range 16 {
		var h [16]byte
		cl.read(h[:])
		cl.read(make([]byte, 512))
		seen[binary.BigEndian.Uint64(h[8:])] = true
	}
	if len(seen) != 16 {
		t.Errorf("replies to %d distinct handles, want 16", len(seen))
	}
	cl.send(cmdDisc, 0, 300, 0, 0, nil)
	if _, err := cl.c.Read(make([]byte, 1)); err == nil {
		t.Error("connection open after NBD_CMD_DISC")
	}

	ro := goExport(t, s, "lun1")
	if e, _ := ro.request(cmdWrite, 0, 1, 0, 4096, make([]byte, 4096)); e != EPERM {
		t.Errorf("WRITE to a read-only export: %v, want EPERM", e)
	}
	if e, _ := ro.request(cmdTrim, 0, 2, 0, 4096, nil); e != EPERM {
		t.Errorf("TRIM of a read-only export: %v, want EPERM", e)
	}
}

// TestOversizedWriteCutsOff: a WRITE longer than the maximum payload
// (whose data cannot be trusted to follow) ends the connection.
func TestOversizedWriteCutsOff(t *testing.T) {
	s, _, _ := testServer()
	cl := goExport(t, s, "lun0")
	cl.send(cmdWrite, 0, 1, 0, 1<<30, nil)
	if _, err := cl.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection open after a 1 GiB WRITE")
	}
}
