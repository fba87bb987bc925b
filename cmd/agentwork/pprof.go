package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"go.uber.org/zap"
)

// pprofEnv names a loopback address (127.0.0.1:6060) where serve exposes
// the Go profiler, for measuring memory and CPU in a soak. Unset: nothing
// listens. It is an environment variable, not a config key: it is for
// whoever investigates a running process, not part of its configuration.
const pprofEnv = "AGENTWORK_PPROF"

// startPprof serves /debug/pprof/ on the address in AGENTWORK_PPROF until
// the returned stop is called. A non-loopback address is refused.
func startPprof(log *zap.Logger) (stop func(), err error) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w (want a loopback host:port, e.g. 127.0.0.1:6060)", pprofEnv, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s=%q: the profiler listens on loopback only (e.g. 127.0.0.1:6060)", pprofEnv, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pprofEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("profiler stopped", zap.Error(err))
		}
	}()
	log.Info("profiler listening", zap.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
