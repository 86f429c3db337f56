package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gosrp/gosrp/internal/nbd"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
)

// nbdMaxPayload is the largest NBD READ or WRITE a client may send, bytes
// (advertised in NBD_INFO_BLOCK_SIZE); each is split into SCSI commands of
// at most max_sect sectors and the LU's MAXIMUM TRANSFER LENGTH.
const nbdMaxPayload = 32 << 20

func newNBDCmd() *cobra.Command {
	var tf targetFlags
	var socket, listen string
	c := &cobra.Command{
		Use:   "nbd TARGET (--socket PATH | --listen HOST:PORT)",
		Short: "serve the target's LUNs as NBD exports (LUN N as lunN, LUN 0 the default) until SIGINT or SIGTERM",
		RunE: func(cmd *cobra.Command, args []string) error {
			if (socket == "") == (listen == "") {
				return errors.New("give one of --socket PATH and --listen HOST:PORT")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := tf.connect(ctx, args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			srv, err := nbdExports(ctx, s)
			if err != nil {
				return err
			}
			l, uri, err := nbdListen(socket, listen)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, n := range srv.names() {
				e := srv.Exports[n]
				fmt.Fprintf(w, "export %s: %s, %d-byte blocks%s\n", n, humanBytes(uint64(e.Size)), e.BlockSize, exportTraits(e))
			}
			fmt.Fprintf(w, "serving %s (default export %s) until SIGINT or SIGTERM\n", uri, srv.Default)
			err = srv.Serve(ctx, l)
			if socket != "" {
				os.Remove(socket)
			}
			return err
		},
	}
	addTargetFlags(c, &tf, false)
	c.Long += `

Every NBD connection (fio's nbd engine, qemu-img, nbdcopy, nbd-client)
shares the one SRP login. NBD_CMD_FLUSH is SYNCHRONIZE CACHE, TRIM is UNMAP
(offered when the LUN is thin provisioned), WRITE_ZEROES is WRITE SAME(16)
(with UNMAP unless the client asks for no hole); FUA is the FUA bit, or
SYNCHRONIZE CACHE after a TRIM or WRITE_ZEROES. Exports advertise
NBD_FLAG_CAN_MULTI_CONN (a flush on one connection covers writes of all)
and the LUN's block size as the minimum I/O size. Examples:

  srpctl nbd "$T" --socket /run/srp-nbd.sock &
  qemu-img convert -O raw 'nbd+unix:///lun0?socket=/run/srp-nbd.sock' disk.raw
  fio --ioengine=nbd --uri='nbd+unix:///lun1?socket=/run/srp-nbd.sock' ...`
	c.Flags().StringVar(&socket, "socket", "", "serve on this unix socket `path`")
	c.Flags().StringVar(&listen, "listen", "", "serve on this TCP `host:port` (no authentication: trusted networks only)")
	return c
}

// nbdServer is the NBD server with its export names.
type nbdServer struct{ *nbd.Server }

func (s nbdServer) names() []string {
	var out []string
	for n := range s.Exports {
		out = append(out, n)
	}
	// lun0, lun1, ..., lun10: by number.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && lunNumberOf(out[j]) < lunNumberOf(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func lunNumberOf(name string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(name, "lun"), "%d", &n)
	return n
}

func exportTraits(e *nbd.Export) string {
	var t []string
	if e.ReadOnly {
		t = append(t, "read-only")
	}
	if _, ok := e.Dev.(nbd.Trimmer); ok {
		t = append(t, "trim")
	}
	if len(t) == 0 {
		return ""
	}
	return ", " + strings.Join(t, ", ")
}

// nbdListen opens the listener and returns the NBD URI of the default
// export.
func nbdListen(socket, listen string) (net.Listener, string, error) {
	if listen != "" {
		l, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, "", fmt.Errorf("--listen: %w", err)
		}
		return l, "nbd://" + l.Addr().String() + "/", nil
	}
	if fi, err := os.Lstat(socket); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, "", fmt.Errorf("--socket %s exists and is not a socket", socket)
		}
		if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
			c.Close()
			return nil, "", fmt.Errorf("--socket %s: another server answers on it", socket)
		}
		os.Remove(socket) // left over from an earlier run
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, "", fmt.Errorf("--socket: %w", err)
	}
	return l, "nbd+unix:///?socket=" + socket, nil
}

// nbdExports makes an export of every LUN the target reports.
func nbdExports(ctx context.Context, s *conn) (nbdServer, error) {
	luns, err := s.ReportLUNs(ctx)
	if err != nil {
		return nbdServer{}, err
	}
	srv := nbdServer{&nbd.Server{Exports: map[string]*nbd.Export{}}}
	for _, l := range luns {
		n := initiator.LUNNumber(l)
		d, err := newLUNDevice(ctx, s, l)
		if err != nil {
			fmt.Fprintf(os.Stderr, "srpctl nbd: lun %d: %v (not exported)\n", n, err)
			continue
		}
		name := fmt.Sprintf("lun%d", n)
		e := &nbd.Export{Name: name, Description: fmt.Sprintf("SRP LUN %d", n), Size: int64(d.size), BlockSize: uint32(d.bs),
			MaxPayload: nbdMaxPayload, ReadOnly: d.readOnly, Dev: d}
		if d.thin {
			e.Dev = thinLUN{d}
		}
		srv.Exports[name] = e
		if n == 0 || srv.Default == "" {
			srv.Default = name
		}
	}
	if len(srv.Exports) == 0 {
		return srv, errors.New("the target reports no usable LUNs")
	}
	if _, ok := srv.Exports["lun0"]; ok {
		srv.Default = "lun0"
	}
	return srv, nil
}

// lunDevice is one LUN as an NBD device: byte offsets become logical
// blocks; unaligned edges are read, modified and written.
type lunDevice struct {
	s        *conn
	lun      uint64
	bs       int    // logical block size, bytes
	size     uint64 // bytes
	maxIO    int    // bytes per READ/WRITE(16)
	readOnly bool
	thin     bool   // LBPME and UNMAP supported (VPD B2h LBPU)
	unmapWS  bool   // WRITE SAME(16) with UNMAP supported (VPD B2h LBPWS)
	maxUnmap uint32 // blocks per UNMAP descriptor (VPD B0h), 0: no limit
	maxDescs int    // descriptors per UNMAP (VPD B0h)
	maxWS    uint32 // blocks per WRITE SAME (VPD B0h), 0: no limit
	noWS     bool   // WRITE SAME refused: zeroes are written as data
}

func newLUNDevice(ctx context.Context, s *conn, lun uint64) (*lunDevice, error) {
	capy, err := s.ReadCapacity16(ctx, lun)
	if err != nil {
		return nil, err
	}
	bs := int(capy.BlockSize)
	d := &lunDevice{s: s, lun: lun, bs: bs, size: capy.Bytes(), maxDescs: 1}
	d.maxIO = max(s.Options().MaxSect*512/bs*bs, bs)
	// Block limits (SBC-3 §6.6.4): MAXIMUM TRANSFER LENGTH (bytes 8-11),
	// MAXIMUM UNMAP LBA COUNT (20-23), MAXIMUM UNMAP BLOCK DESCRIPTOR
	// COUNT (24-27), MAXIMUM WRITE SAME LENGTH (36-43).
	if b, err := s.Inquiry(ctx, lun, true, 0xb0, 64); err == nil && len(b) >= 44 {
		if mt := binary.BigEndian.Uint32(b[8:]); mt > 0 && int(mt)*bs < d.maxIO {
			d.maxIO = int(mt) * bs
		}
		d.maxUnmap = binary.BigEndian.Uint32(b[20:])
		d.maxDescs = max(int(binary.BigEndian.Uint32(b[24:])), 1)
		if ws := binary.BigEndian.Uint64(b[36:]); ws > 0 && ws < 1<<32 {
			d.maxWS = uint32(ws)
		}
	}
	// Logical block provisioning (SBC-3 §6.6.6): LBPU byte 5 bit 7, LBPWS bit 6.
	if capy.LBPME {
		if b, err := s.Inquiry(ctx, lun, true, 0xb2, 8); err == nil && len(b) >= 6 {
			d.thin = b[5]&0x80 != 0
			d.unmapWS = b[5]&0x40 != 0
		}
	}
	// MODE SENSE(6), all pages: the device-specific parameter's WP bit
	// (SBC-3 §6.5.1).
	hdr := make([]byte, 4)
	if res, err := s.Run(ctx, &initiator.Command{LUN: lun, CDB: []byte{0x1a, 0, 0x3f, 0, 4, 0}, DataIn: [][]byte{hdr}}); err == nil && res.DataInLen >= 3 {
		d.readOnly = hdr[2]&0x80 != 0
	}
	return d, nil
}

// nbdErr maps an initiator error to the NBD error value: DATA PROTECT is
// EPERM, LBA OUT OF RANGE EINVAL, SPACE ALLOCATION FAILED ENOSPC, the
// rest EIO (wrapped, so the server logs nothing it cannot say).
func nbdErr(err error) error {
	if err == nil {
		return nil
	}
	var se *initiator.SenseError
	if errors.As(err, &se) {
		switch {
		case se.Key == sense.KeyDataProtect && se.ASC == 0x27 && se.ASCQ == 0x07:
			return nbd.ENOSPC // SPACE ALLOCATION FAILED WRITE PROTECT
		case se.Key == sense.KeyDataProtect:
			return nbd.EPERM
		case se.Key == sense.KeyIllegalRequest && se.ASC == 0x21:
			return nbd.EINVAL
		}
	}
	return fmt.Errorf("%w: %w", nbd.EIO, err)
}

func (d *lunDevice) ReadAt(ctx context.Context, p []byte, off int64) error {
	first, last := off/int64(d.bs), (off+int64(len(p))+int64(d.bs)-1)/int64(d.bs)
	if off%int64(d.bs) == 0 && len(p)%d.bs == 0 {
		return nbdErr(d.read(ctx, p, uint64(first)))
	}
	buf := make([]byte, (last-first)*int64(d.bs))
	if err := d.read(ctx, buf, uint64(first)); err != nil {
		return nbdErr(err)
	}
	copy(p, buf[off-first*int64(d.bs):])
	return nil
}

// read reads whole blocks at lba in commands of at most maxIO bytes.
func (d *lunDevice) read(ctx context.Context, p []byte, lba uint64) error {
	for len(p) > 0 {
		n := min(len(p), d.maxIO)
		if err := d.s.Read16(ctx, d.lun, lba, p[:n], d.bs, false); err != nil {
			return err
		}
		p, lba = p[n:], lba+uint64(n/d.bs)
	}
	return nil
}

// write writes whole blocks at lba in commands of at most maxIO bytes.
func (d *lunDevice) write(ctx context.Context, p []byte, lba uint64, fua bool) error {
	for len(p) > 0 {
		n := min(len(p), d.maxIO)
		if err := d.s.Write16(ctx, d.lun, lba, p[:n], d.bs, fua); err != nil {
			return err
		}
		p, lba = p[n:], lba+uint64(n/d.bs)
	}
	return nil
}

func (d *lunDevice) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	bs := int64(d.bs)
	if off%bs == 0 && int64(len(p))%bs == 0 {
		return nbdErr(d.write(ctx, p, uint64(off/bs), fua))
	}
	// Read, modify, write the blocks p touches. NBD leaves overlapping
	// requests in flight undefined, so no lock is taken.
	first, last := off/bs, (off+int64(len(p))+bs-1)/bs
	buf := make([]byte, (last-first)*bs)
	if err := d.read(ctx, buf, uint64(first)); err != nil {
		return nbdErr(err)
	}
	copy(buf[off-first*bs:], p)
	return nbdErr(d.write(ctx, buf, uint64(first), fua))
}

func (d *lunDevice) Flush(ctx context.Context) error {
	return nbdErr(d.s.SynchronizeCache(ctx, d.lun))
}

// WriteZeroes zeroes the whole blocks in range with WRITE SAME(16) (UNMAP
// set when mayTrim and the LU supports it) and the partial edges by
// read-modify-write; a LU that refuses WRITE SAME gets zeroed data.
func (d *lunDevice) WriteZeroes(ctx context.Context, off, n int64, mayTrim, fua bool) error {
	bs := int64(d.bs)
	start, end := (off+bs-1)/bs, (off+n)/bs // whole blocks [start, end)
	if start >= end {
		return d.WriteAt(ctx, make([]byte, n), off, fua)
	}
	if head := start*bs - off; head > 0 {
		if err := d.WriteAt(ctx, make([]byte, head), off, fua); err != nil {
			return err
		}
	}
	if tail := off + n - end*bs; tail > 0 {
		if err := d.WriteAt(ctx, make([]byte, tail), end*bs, fua); err != nil {
			return err
		}
	}
	zero := make([]byte, bs)
	for lba := uint64(start); lba < uint64(end); {
		cnt := min(uint64(end)-lba, 1<<22)
		if d.maxWS > 0 {
			cnt = min(cnt, uint64(d.maxWS))
		}
		var err error
		if !d.noWS {
			err = d.s.WriteSame16(ctx, d.lun, lba, uint32(cnt), zero, mayTrim && d.unmapWS)
			var se *initiator.SenseError
			if errors.As(err, &se) && se.Key == sense.KeyIllegalRequest && se.ASC == 0x20 { // INVALID COMMAND OPERATION CODE
				d.noWS, err = true, nil
				continue
			}
		} else {
			cnt = min(cnt, uint64(d.maxIO/d.bs))
			err = d.write(ctx, make([]byte, cnt*uint64(bs)), lba, false)
		}
		if err != nil {
			return nbdErr(err)
		}
		lba += cnt
	}
	if fua {
		return d.Flush(ctx)
	}
	return nil
}

// thinLUN is a thin-provisioned LUN: it also trims (UNMAP).
type thinLUN struct{ *lunDevice }

// Trim unmaps the whole blocks in [off, off+n): TRIM is advisory, partial
// blocks stay as they are.
func (d thinLUN) Trim(ctx context.Context, off, n int64, fua bool) error {
	bs := int64(d.bs)
	start, end := uint64((off+bs-1)/bs), uint64((off+n)/bs)
	per := uint64(d.maxUnmap)
	if per == 0 || per > 1<<31 {
		per = 1 << 31
	}
	var ext []initiator.Extent
	flush := func() error {
		if len(ext) == 0 {
			return nil
		}
		err := d.s.Unmap(ctx, d.lun, ext)
		ext = ext[:0]
		return nbdErr(err)
	}
	for lba := start; lba < end; {
		cnt := min(end-lba, per)
		ext = append(ext, initiator.Extent{LBA: lba, Blocks: uint32(cnt)})
		if len(ext) == d.maxDescs {
			if err := flush(); err != nil {
				return err
			}
		}
		lba += cnt
	}
	if err := flush(); err != nil {
		return err
	}
	if fua {
		return d.Flush(ctx)
	}
	return nil
}
