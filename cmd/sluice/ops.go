package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/cluster"
	"github.com/sluice-rl/sluice/resp"
)

// clientTLSConfig builds the TLS listener's configuration: its certificate,
// and with --tls-ca-cert-file, client certificates required and verified.
func (c *config) clientTLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: with %s %s: %w", c.setting("tls-cert-file"), c.setting("tls-key-file"), c.TLSKeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSCACertFile != "" {
		pool, err := cluster.LoadCertPool(c.TLSCACertFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.setting("tls-ca-cert-file"), err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// peerTLSConfig builds the mutual TLS configuration of Raft and forwarding,
// or nil without --raft-tls-* flags.
func (c *config) peerTLSConfig() (*tls.Config, error) {
	if !c.raftTLS() {
		return nil, nil
	}
	return cluster.PeerTLSConfig(c.RaftTLSCertFile, c.RaftTLSKeyFile, c.RaftTLSCACertFile)
}

// checkPrivate refuses a peer listening address that is reachable beyond
// private networks: Raft and forwarding without mutual TLS trust whoever
// connects, so they may only listen on loopback, private (RFC 1918, IPv6
// ULA), shared (RFC 6598, 100.64/10) or link-local addresses. An unspecified
// address (0.0.0.0, ::) binds public interfaces too and is refused; a host
// name is checked by every address it resolves to.
func checkPrivate(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	fix := "listen on a loopback or private address, or secure peer traffic with --raft-tls-cert-file, --raft-tls-key-file and --raft-tls-ca-cert-file"
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if host == "" {
		ips = []net.IP{net.IPv4zero}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil // the listener will fail with its own error
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if ip.IsUnspecified() {
			return fmt.Errorf("%s binds every interface, public ones included, and Raft and forwarding traffic is neither encrypted nor authenticated: %s", addr, fix)
		}
		if !privateIP(ip) {
			return fmt.Errorf("%s is a public address, and Raft and forwarding traffic is neither encrypted nor authenticated: %s", addr, fix)
		}
	}
	return nil
}

// privateIP reports whether ip is loopback, private, link-local or in RFC
// 6598's shared space 100.64.0.0/10 (carrier-grade NAT, overlay networks).
func privateIP(ip net.IP) bool {
	if ip4 := ip.To4(); ip4 != nil && ip4[0] == 100 && ip4[1]&0xc0 == 64 {
		return true
	}
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast()
}

// readiness says whether the process can serve commands (/readyz): nil,
// or why not.
type readiness func() error

// metricsServer serves /metrics, /healthz and /readyz.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// startMetrics listens on addr and serves the registry's metrics, the
// liveness probe (/healthz: the process answers) and the readiness probe
// (/readyz: ready() is nil).
// With withPprof it also serves net/http/pprof under /debug/pprof/.
func startMetrics(addr string, reg *prometheus.Registry, ready readiness, withPprof bool, log *slog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	m := &metricsServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return m, nil
}

func (m *metricsServer) close(ctx context.Context) {
	_ = m.srv.Shutdown(ctx)
	<-m.done
}

// newRegistry returns the process's registry: Go runtime and process
// metrics plus the given collectors. Nothing is registered globally.
func newRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{PidFn: func() (int, error) { return os.Getpid(), nil }}),
	)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// startOpsMetrics starts the metrics server over the RESP server's and,
// on a cluster node, the node's metrics; a node is ready when Node.Ready
// says so, a single in-memory node always.
func startOpsMetrics(addr string, withPprof bool, srv *resp.Server, exec resp.Executor, log *slog.Logger) (*metricsServer, error) {
	cs := []prometheus.Collector{srv.Collector()}
	ready := readiness(func() error { return nil })
	if node, ok := exec.(*cluster.Node); ok {
		cs = append(cs, node.Collector())
		ready = node.Ready
	}
	reg, err := newRegistry(cs...)
	if err != nil {
		return nil, err
	}
	return startMetrics(addr, reg, ready, withPprof, log)
}
