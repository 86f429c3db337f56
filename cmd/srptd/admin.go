package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/scsi"
)

// adminServer is the admin API: HTTP/1.1 with JSON bodies (package
// adminapi) over a unix socket (mode 0600; only root and the daemon's own
// user may connect, checked with SO_PEERCRED). docs/srptd.md lists the
// endpoints.
type adminServer struct {
	srv  *http.Server
	path string
}

// Backstores reports the backstores in LUN order.
func (d *daemon) Backstores() []adminapi.Backstore {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []adminapi.Backstore{}
	for _, n := range slices.Sorted(maps.Keys(d.luns)) {
		st := d.luns[n]
		b := adminapi.Backstore{LUN: n, Name: st.sec.Name, Type: st.sec.Backstore, Path: st.path, Size: st.bs.Size(), ReadOnly: st.sec.ReadOnly}
		switch bs := st.bs.(type) {
		case interface{ AllocatedBytes() int64 }:
			v := bs.AllocatedBytes()
			b.Allocated = &v
		default:
			if st.sec.Backstore == "file" {
				if fi, err := os.Stat(st.path); err == nil {
					if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
						v := sys.Blocks * 512 // st_blocks counts 512-byte units (stat(2))
						b.Allocated = &v
					}
				}
			}
		}
		out = append(out, b)
	}
	return out
}

// LUNs reports the attached logical units in LUN order.
func (d *daemon) LUNs() []adminapi.LUN {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []adminapi.LUN{}
	for _, n := range slices.Sorted(maps.Keys(d.luns)) {
		st := d.luns[n]
		out = append(out, adminapi.LUN{
			LUN: n, Name: st.sec.Name, Backstore: st.sec.Backstore, Path: st.path,
			Size: st.bs.Size(), BlockSize: st.lu.BlockSize(), ReadOnly: st.sec.ReadOnly,
			Serial: st.lu.Serial(), Counters: st.stats.snapshot(),
		})
	}
	return out
}

// Sessions reports every channel of every port.
func (d *daemon) Sessions() []adminapi.Session {
	out := []adminapi.Session{}
	for _, p := range d.Ports() {
		for _, s := range p.Sessions() {
			out = append(out, adminapi.Session{
				Port: p.Config().Name, Channel: s.Channel, InitiatorPort: s.InitiatorPort, Remote: s.Remote, State: s.State,
				ReqLim: s.ReqLim, Outstanding: s.Outstanding, Immediate: s.Immediate,
				Commands: s.Commands, ReadBytes: s.ReadBytes, WriteBytes: s.WriteBytes, Errors: s.Errors,
				CheckConditions: s.CheckConditions, TMFs: s.TMFs, MaxOutstanding: s.MaxOutstanding,
			})
		}
	}
	slices.SortFunc(out, func(a, b adminapi.Session) int {
		if a.Port != b.Port {
			if a.Port < b.Port {
				return -1
			}
			return 1
		}
		return int(a.Channel) - int(b.Channel)
	})
	return out
}

// lunSection is the [[lun]] section a POST /luns body describes. A size
// error names the key, as Validate names the others.
func lunSection(r adminapi.NewLUN) (LUNSection, error) {
	sec := LUNSection{
		LUN: r.LUN, Name: r.Name, Backstore: r.Backstore, Path: r.Path, BlockSize: r.BlockSize,
		ReadOnly: r.ReadOnly, WriteCache: r.WriteCache, ThinProvisioning: r.ThinProvisioning,
		Serial: r.Serial, WWN: r.WWN, Pool: r.Pool, Image: r.Image,
		CephConf: r.CephConf, CephClient: r.CephClient, CephKeyring: r.CephKeyring,
	}
	if r.Size != "" {
		if err := sec.Size.UnmarshalJSON(strconv.AppendQuote(nil, string(r.Size))); err != nil {
			return sec, ferr("lun.size", "%v", err)
		}
	}
	return sec, nil
}

// maxSocketPath is the longest unix socket path Linux binds (sun_path is
// 108 bytes with the terminating NUL).
const maxSocketPath = 107

// adminSocketFree: path is free for startAdmin: missing, or a socket
// nobody answers on (left over from an earlier run, which startAdmin
// replaces); never a file or a socket another srptd serves.
func adminSocketFree(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket == 0 {
		// Never replace what is not a socket (a typo naming a file).
		return fmt.Errorf("%s exists and is not a unix socket", path)
	} else if err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return errors.New("another srptd is serving this admin socket")
		}
	}
	return nil
}

func startAdmin(path string, d *daemon, log *slog.Logger) (*adminServer, error) {
	if err := adminSocketFree(path); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path) // left over from an earlier run
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	a := &adminServer{
		srv:  &http.Server{Handler: adminHandler(d, log), ReadHeaderTimeout: 5 * time.Second},
		path: path,
	}
	go func() {
		if err := a.srv.Serve(peerCheckListener{l.(*net.UnixListener), log}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin API stopped", "err", err)
		}
	}()
	log.Info("admin API listening", "socket", path)
	return a, nil
}

func (a *adminServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	_ = os.Remove(a.path)
}

// peerCheckListener accepts connections only from root and from the
// daemon's own effective user (SO_PEERCRED).
type peerCheckListener struct {
	*net.UnixListener
	log *slog.Logger
}

func (l peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == 0 || uid == os.Geteuid()) {
			return c, nil
		}
		l.log.Warn("admin API: connection refused", "uid", uid, "err", err)
		c.Close()
	}
}

func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, scsi.ErrNoSuchLUN):
		code = http.StatusNotFound
	case errors.Is(err, errConflict):
		code = http.StatusConflict
	}
	writeJSON(w, code, adminapi.Error{Error: err.Error()})
}

// decodeBody reads a body of one JSON value; unknown fields and anything
// after the value are errors.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("request body: more than one JSON value")
	}
	return nil
}

func adminHandler(d *daemon, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+adminapi.PathLoginInfo, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.LoginInfo())
	})
	mux.HandleFunc("GET "+adminapi.PathSessions, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Sessions())
	})
	mux.HandleFunc("DELETE "+adminapi.PathSessions+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		found := false
		for _, p := range d.Ports() {
			if p.RemoveSession(name) {
				found = true
			}
		}
		if !found {
			writeErr(w, notFoundf("no session %q", name))
			return
		}
		log.Info("admin removed session", "name", name)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+adminapi.PathLUNs, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.LUNs())
	})
	mux.HandleFunc("GET "+adminapi.PathBackstores, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Backstores())
	})
	mux.HandleFunc("POST "+adminapi.PathLUNs, func(w http.ResponseWriter, r *http.Request) {
		var req adminapi.NewLUN
		if err := decodeBody(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		sec, err := lunSection(req)
		if err != nil {
			writeErr(w, err)
			return
		}
		if err := d.AddLUN(sec); err != nil {
			writeErr(w, err)
			return
		}
		log.Info("admin added LUN", "lun", *sec.LUN)
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("DELETE "+adminapi.PathLUNs+"/{lun}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseUint(r.PathValue("lun"), 10, 64)
		if err != nil {
			writeErr(w, fmt.Errorf("%q is not a LUN number", r.PathValue("lun")))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		if err := d.RemoveLUN(ctx, n); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+adminapi.PathACLs, func(w http.ResponseWriter, r *http.Request) {
		out := []adminapi.ACL{}
		for _, a := range d.ACLs() {
			out = append(out, adminapi.ACL{Initiator: a.Initiator, LUNs: a.LUNs, ReadOnly: a.ReadOnly})
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST "+adminapi.PathACLs, func(w http.ResponseWriter, r *http.Request) {
		var req adminapi.ACL
		if err := decodeBody(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		a := ACLSection{Initiator: req.Initiator, LUNs: req.LUNs, ReadOnly: req.ReadOnly}
		demo, err := d.AddACL(a)
		if err != nil {
			writeErr(w, err)
			return
		}
		log.Info("admin added ACL", "initiator", a.Initiator, "demo_mode", demo)
		writeJSON(w, http.StatusCreated, adminapi.ACLAdded{DemoMode: demo})
	})
	mux.HandleFunc("DELETE "+adminapi.PathACLs+"/{initiator}", func(w http.ResponseWriter, r *http.Request) {
		if err := d.RemoveACL(r.PathValue("initiator")); err != nil {
			writeErr(w, err)
			return
		}
		log.Info("admin removed ACL", "initiator", r.PathValue("initiator"))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+adminapi.PathALUA, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.PortGroups())
	})
	mux.HandleFunc("PUT "+adminapi.PathALUA+"/{group}", func(w http.ResponseWriter, r *http.Request) {
		g, err := strconv.ParseUint(r.PathValue("group"), 10, 16)
		if err != nil {
			writeErr(w, fmt.Errorf("%q is not a target port group ID (0..65535)", r.PathValue("group")))
			return
		}
		var req adminapi.ALUAState
		if err := decodeBody(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		if err := d.SetALUAState(uint16(g), req.State); err != nil {
			writeErr(w, err)
			return
		}
		log.Info("admin set ALUA state", "group", g, "state", req.State)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+adminapi.PathSave, func(w http.ResponseWriter, r *http.Request) {
		p, kept, err := d.Save()
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, adminapi.Error{Error: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, adminapi.Saved{Path: p, Kept: kept})
	})
	return mux
}
