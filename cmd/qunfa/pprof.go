package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
)

// startPprof serves the runtime profiles (net/http/pprof) on addr, a
// loopback address only: a debugging aid, off unless --pprof or
// QUNFA_PPROF names an address. It returns the address it listens on.
func startPprof(addr string, log *slog.Logger) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--pprof %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", errors.New("--pprof must listen on a loopback address (127.0.0.1:PORT): profiles are not for the network")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		if err := http.Serve(ln, mux); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Warn("pprof listener stopped", slog.Any("err", err))
		}
	}()
	return ln.Addr().String(), nil
}

// pprofAddr is qunfa dev's --pprof flag, or QUNFA_PPROF when the flag is
// unset.
func pprofAddr(flagValue string) string {
	return flagOrEnv(flagValue, "QUNFA_PPROF")
}

// flagOrEnv is a flag's value, or the environment variable env when the
// flag is unset. The mock provider reads its own variable
// (QUNFA_MOCK_PPROF): a benchmark starts it next to qunfa dev with the
// same environment, and both cannot listen on one address.
func flagOrEnv(flagValue, env string) string {
	if flagValue != "" {
		return flagValue
	}
	return strings.TrimSpace(os.Getenv(env))
}
