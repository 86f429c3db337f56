package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
)

// startPprof serves the Go profiler on addr until the returned stop is
// called.
func startPprof(addr string, log *slog.Logger) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	log.Info("profiler listening", "addr", l.Addr())
	return func() { _ = srv.Close() }, nil
}
