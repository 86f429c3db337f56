package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gosrp/gosrp/srp/target"
)

// adminServer is the admin API: HTTP over a unix socket.
//
//	GET    /sessions         → JSON list of channels of every port
//	DELETE /sessions/{name}  → SRP_T_LOGOUT and close the channels of an
//	                           initiator port ID (32 hex digits) or one
//	                           channel number; 404 if none matched
type adminServer struct {
	srv  *http.Server
	path string
}

type sessionJSON struct {
	Port string `json:"port"`
	target.SessionInfo
}

func startAdmin(path string, ports []*target.Port, log *slog.Logger) (*adminServer, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path) // stale socket of an earlier run
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, r *http.Request) {
		out := []sessionJSON{}
		for _, p := range ports {
			for _, s := range p.Sessions() {
				out = append(out, sessionJSON{Port: p.Config().Name, SessionInfo: s})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("DELETE /sessions/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		found := false
		for _, p := range ports {
			if p.RemoveSession(name) {
				found = true
			}
		}
		if !found {
			http.Error(w, "no such session", http.StatusNotFound)
			return
		}
		log.Info("admin removed session", "name", name)
		w.WriteHeader(http.StatusNoContent)
	})
	a := &adminServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, path: path}
	go func() {
		if err := a.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
