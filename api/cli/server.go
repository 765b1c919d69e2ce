package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"
)

// NewHTTPServer returns the server for h. Every phase of a connection has a
// deadline, so slow or stalled clients cannot hold connections open.
func NewHTTPServer(h http.Handler, tlsCfg *tls.Config, logs slog.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logs, slog.LevelWarn),
	}
}

// ServeMetrics serves GET /metrics on addr, with the same deadlines as the
// API: metrics on their own address can stay inside the network while the
// API faces clients.
func ServeMetrics(addr string, metrics http.Handler, logs slog.Handler, stdout io.Writer) (stop func() error, err error) {
	mln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	msrv := NewHTTPServer(mux, nil, logs)
	go func() {
		if err := msrv.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
			slog.New(logs).Error("metrics server failed", "err", err)
		}
	}()
	fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", mln.Addr())
	return msrv.Close, nil
}

// Serve serves srv on ln until ctx ends, then shuts it down, giving
// requests in flight 10 seconds to finish.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, useTLS bool, log *slog.Logger) error {
	serveErr := make(chan error, 1)
	go func() {
		if useTLS {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	var err error
	select {
	case err = <-serveErr:
	case <-ctx.Done():
		log.Info("shutting down")
		shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(shutCtx)
		cancel()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// LoadTLS loads the certificate and key, so that a bad pair stops the
// service at start-up rather than at the first client. Without a
// certificate it returns nil: the service speaks plain HTTP.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Garbage collection settings of the service, unless GOGC or GOMEMLIMIT
// set others. Its live heap is a few megabytes and every check allocates a
// few kilobytes, so with Go's default (collect when the heap doubles) it
// collects many times a second, about a seventh of its CPU time under
// load. Letting the heap grow to five times the live data before a
// collection costs a few more megabytes; the limit makes collections
// frequent again long before memory would grow past it.
const (
	GCPercent   = 400
	MemoryLimit = 64 << 20
)

// TuneGC applies the settings above where the environment, read through
// getenv, sets none.
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(MemoryLimit)
	}
}
