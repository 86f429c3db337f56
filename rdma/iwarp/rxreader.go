package iwarp

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rxReader is the receive side's buffered reader (the subset of
// bufio.Reader the reader goroutine uses) with one addition, readPayload:
// a payload too large for the buffer is read with readv(2) straight into
// the registered memory, its pad and CRC field and as much of the stream
// after it as the buffer holds gathered by the same system call. The next
// FPDU's header then comes from the buffer: one system call per large FPDU
// and no copy of the payload through the buffer.
type rxReader struct {
	rd   io.Reader
	rc   syscall.RawConn // nil when rd is not a TCP socket: plain reads
	buf  []byte
	base []byte // the buffer made at start; buf is larger only while it holds bytes given back by load
	r, w int    // buf[r:w] is buffered
	err  error
	// idle, if set, runs before each read from the stream, when every
	// complete FPDU buffered has been handled (the completion hook).
	idle func()
	// lone, when set, is the connection's LoneWaiter state: the reader
	// waits in eagerWait before Go's poller.
	lone *atomic.Bool
	// eagerHits counts the waits in eagerWait that found input.
	eagerHits atomic.Uint64

	// The readv call's vector, result and callback, kept here so that
	// nothing is allocated per FPDU.
	iov    [rxMaxIov]unix.Iovec
	niov   int
	got    int
	errno  syscall.Errno
	readvF func(fd uintptr) bool
}

// rxReadv enables the readv path (benchmarks compare without it).
var rxReadv = true

// rxMaxPieces is how many destination pieces readPayloadV gathers into
// in one readv(2) (with the trailer and the buffer: two more iovecs).
const rxMaxPieces = 16

// rxMaxIov is the most iovecs one readv(2) of the reader is given: a
// Read Response and the segments predicted after it (placeRun).
const rxMaxIov = 64

// rxAhead is how many bytes of the stream after a payload of at least the
// buffer's size readPayload gathers into the buffer: the next FPDU's MPA
// length and untagged DDP header, so that in a stream of large FPDUs (Read
// Responses or RDMA Writes of a bulk transfer) the next payload is read
// into its region too instead of half of it through the buffer.
const rxAhead = mpaLenSize + ddpUntaggedHdrLen

func newRxReader(rd io.Reader, size int) *rxReader {
	b := &rxReader{rd: rd, buf: make([]byte, size)}
	b.base = b.buf
	if tc, ok := rd.(*net.TCPConn); ok && rxReadv {
		if rc, err := tc.SyscallConn(); err == nil {
			b.rc = rc
			b.readvF = b.readv
		}
	}
	return b
}

// readv is the raw read callback: one readv(2) of b.iov[:b.niov]; false
// (wait for input) on EAGAIN.
//
// The socket is non-blocking, so the call cannot block: it is made as a
// raw system call, without the scheduler's entersyscall/exitsyscall. Those
// wake the runtime's monitor thread (sysmon) whenever every P was idle
// before the call, which at queue depth 1 is every command: a futex wake-up
// and a thread switch per read (7 % of srptd's CPU at 4 KiB QD1).
func (b *rxReader) readv(fd uintptr) bool {
	n, _, e := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&b.iov[0])), uintptr(b.niov))
	for e == unix.EINTR {
		n, _, e = unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&b.iov[0])), uintptr(b.niov))
	}
	if e == unix.EAGAIN && b.lone != nil && b.lone.Load() && b.eagerWait(fd) {
		n, _, e = unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&b.iov[0])), uintptr(b.niov))
	}
	b.got, b.errno = int(n), e
	return e != unix.EAGAIN
}

// Eager waiting (rdma.LoneWaiter). Go's poller waits for input in
// epoll_wait, and the kernel wakes an epoll waiter as an ordinary
// wake-up: the thread runs on an idle CPU if there is one. A thread
// waiting in poll(2) itself gets the socket's synchronous wake-up
// (sock_def_readable), which the scheduler may run on the sending thread's
// CPU as that thread goes on to wait for the answer. For a connection
// that carries one message at a time (a command at queue depth 1, then its
// response) that is the difference between a cross-CPU wake-up per
// message, an inter-processor interrupt and a CPU leaving its idle state
// (tens of µs in a virtual machine), and none. Under load the same
// placement costs: the woken reader shares the sender's CPU and takes
// input one message at a time instead of in batches (4 KiB random writes
// at queue depth 32 lost 8-14 %), hence the consumer's hint. The reader
// waits in ppoll(2) for up to rxEagerWait, then in Go's poller; at most
// rxEagerMax readers of the process (one less than the CPUs, at least
// one) wait so at once. Each holds a thread and, until the runtime hands
// it to another thread or the wait ends, its P: with GOMAXPROCS 1 (srpctl
// bench at queue depth 1) other goroutines may wait that long.
var (
	rxEagerWait   = time.Millisecond
	rxEagerMax    = int32(max(runtime.NumCPU()-1, 1))
	rxEagerActive atomic.Int32
)

// eagerWait waits in ppoll(2) for input on fd for up to rxEagerWait, if
// fewer than rxEagerMax readers are doing so; it reports whether input
// arrived. The system call is made as a blocking one (entersyscall), so
// the runtime may run other goroutines on this P meanwhile.
func (b *rxReader) eagerWait(fd uintptr) bool {
	if rxEagerWait <= 0 {
		return false
	}
	if rxEagerActive.Add(1) > rxEagerMax {
		rxEagerActive.Add(-1)
		return false
	}
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	ts := unix.NsecToTimespec(int64(rxEagerWait))
	k, _, _ := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	rxEagerActive.Add(-1)
	if int(k) <= 0 || pfd.Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) == 0 {
		return false
	}
	b.eagerHits.Add(1)
	return true
}

// readStream reads once from the stream into p (len(p) > 0): on a TCP
// socket by readv's raw system call (one iovec) that waits for input in
// Go's poller, else by rd.Read. End of stream is io.EOF.
func (b *rxReader) readStream(p []byte) (int, error) {
	if b.rc == nil {
		return b.rd.Read(p)
	}
	b.setIov(p)
	n, err := b.readIov()
	if err == nil && n == 0 {
		err = io.EOF
	}
	return n, err
}

// readIov makes one readv(2) of b.iov[:b.niov], waiting in Go's poller
// for input, and clears the vector: the bytes read (0 at end of stream)
// or the error.
func (b *rxReader) readIov() (int, error) {
	err := b.rc.Read(b.readvF)
	if err == nil && b.errno != 0 {
		err = os.NewSyscallError("readv", b.errno)
	}
	clear(b.iov[:b.niov])
	if err != nil {
		return 0, err
	}
	return b.got, nil
}

// setIov points b.iov at the non-empty slices of bufs.
func (b *rxReader) setIov(bufs ...[]byte) {
	b.niov = 0
	b.addIov(bufs...)
}

// addIov appends the non-empty slices of bufs to b.iov.
func (b *rxReader) addIov(bufs ...[]byte) {
	for _, p := range bufs {
		if len(p) > 0 {
			b.iov[b.niov].Base = &p[0]
			b.iov[b.niov].SetLen(len(p))
			b.niov++
		}
	}
}

// Size is the buffer size, bytes.
func (b *rxReader) Size() int { return len(b.buf) }

func (b *rxReader) readErr() error {
	err := b.err
	b.err = nil
	return err
}

// drained empties the buffer (all of it consumed) and returns to the
// buffer made at start if load had replaced it with a larger one.
func (b *rxReader) drained() {
	b.r, b.w = 0, 0
	b.buf = b.base
}

// load makes p the buffered bytes (the buffer must be empty): the stream
// read ahead of an FPDU whose prediction failed (placeRun), to be parsed
// again. A p larger than the buffer becomes the buffer until drained.
func (b *rxReader) load(p []byte) {
	if len(p) <= len(b.base) {
		b.buf = b.base
		copy(b.buf, p)
	} else {
		b.buf = p
	}
	b.r, b.w = 0, len(p)
}

// gatherTo reads the stream into layout, the concatenation of its slices,
// from byte pos on, until at least need bytes of it are filled; each
// readv(2) (at most rxMaxIov slices) offers the whole rest of the layout,
// so bytes beyond need are taken as they are there, but never waited for.
// It returns the new position. The buffer must be empty.
func (b *rxReader) gatherTo(layout [][]byte, pos, need int) (int, error) {
	for pos < need {
		b.niov = 0
		skip := pos
		for _, s := range layout {
			if skip >= len(s) {
				skip -= len(s)
				continue
			}
			if b.niov == len(b.iov) {
				break
			}
			b.addIov(s[skip:])
			skip = 0
		}
		got, err := b.readIov()
		if err != nil {
			return pos, err
		}
		if got == 0 {
			return pos, io.ErrUnexpectedEOF
		}
		pos += got
	}
	return pos, nil
}

// fill reads once into the free end of the buffer (compacted first).
func (b *rxReader) fill() {
	if b.idle != nil {
		b.idle()
	}
	if b.r == b.w && len(b.buf) != len(b.base) {
		b.drained()
	}
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	for i := 0; i < 100; i++ {
		n, err := b.readStream(b.buf[b.w:])
		b.w += n
		if err != nil {
			b.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	b.err = io.ErrNoProgress
}

// Read reads up to len(p) bytes: from the buffer, or (buffer empty and p
// at least as large) straight from the stream.
func (b *rxReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if b.err != nil {
			return 0, b.readErr()
		}
		b.drained()
		if len(p) >= len(b.buf) {
			if b.idle != nil {
				b.idle()
			}
			return b.readStream(p)
		}
		b.fill()
		if b.r == b.w {
			return 0, b.readErr()
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// Peek returns the next n buffered bytes without consuming them, reading
// as needed; n must not exceed Size.
func (b *rxReader) Peek(n int) ([]byte, error) {
	for b.w-b.r < n && b.err == nil {
		b.fill()
	}
	if b.w-b.r < n {
		return b.buf[b.r:b.w], b.readErr()
	}
	return b.buf[b.r : b.r+n], nil
}

// Discard skips up to n buffered bytes.
func (b *rxReader) Discard(n int) (int, error) {
	n = min(n, b.w-b.r)
	b.r += n
	return n, nil
}

// readPayload fills dst and then tr from the stream (io.ReadFull of each,
// in order), gathering with readv once the buffer is drained. After a
// payload of at least the buffer's size only rxAhead bytes of the stream
// that follows are gathered; after a smaller one, as many as the buffer
// holds.
func (b *rxReader) readPayload(dst, tr []byte) error {
	one := [1][]byte{dst}
	return b.readPayloadV(one[:], tr)
}

// readPayloadV is readPayload with the payload's destination in pieces
// (at most rxMaxPieces; dsts is consumed): one readv(2) gathers into all
// of them.
func (b *rxReader) readPayloadV(dsts [][]byte, tr []byte) error {
	total := 0
	for _, d := range dsts {
		total += len(d)
	}
	// Sizes compare with the buffer made at start: a larger one given by
	// load is dropped once drained.
	large := total >= len(b.base)
	for len(dsts) > 0 && b.r < b.w {
		n := copy(dsts[0], b.buf[b.r:b.w])
		b.r += n
		total -= n
		if dsts[0] = dsts[0][n:]; len(dsts[0]) == 0 {
			dsts = dsts[1:]
		}
	}
	if total == 0 || b.rc == nil || total < len(b.base)/4 {
		for _, d := range dsts {
			if _, err := io.ReadFull(b, d); err != nil {
				return err
			}
		}
		_, err := io.ReadFull(b, tr)
		return err
	}
	if b.err != nil {
		return b.readErr()
	}
	// The buffer is empty here.
	b.drained()
	if b.idle != nil {
		b.idle()
	}
	end := len(b.buf)
	if large {
		end = rxAhead
	}
	for len(dsts) > 0 || len(tr) > 0 {
		b.niov = 0
		b.addIov(dsts...)
		b.addIov(tr, b.buf[b.w:end])
		got, err := b.readIov()
		if err != nil {
			return err
		}
		if got == 0 {
			return io.ErrUnexpectedEOF
		}
		for len(dsts) > 0 && got > 0 {
			k := min(got, len(dsts[0]))
			got -= k
			if dsts[0] = dsts[0][k:]; len(dsts[0]) == 0 {
				dsts = dsts[1:]
			}
		}
		k := min(got, len(tr))
		tr, got = tr[k:], got-k
		b.w += got
	}
	return nil
}
