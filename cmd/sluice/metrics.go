package main

import (
	"context"
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

// Metrics and probes: the HTTP listener of --metrics-addr.

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
// extra are more collectors (the rate limit service's).
func startOpsMetrics(addr string, withPprof bool, srv *resp.Server, exec resp.Executor, log *slog.Logger, build buildInfo, extra ...prometheus.Collector) (*metricsServer, error) {
	cs := append([]prometheus.Collector{srv.Collector(), buildInfoCollector(build)}, extra...)
	ready := readiness(func() error { return nil })
	if host, ok := exec.(*cluster.Host); ok {
		cs = append(cs, host.Collector())
		ready = host.Ready
	}
	reg, err := newRegistry(cs...)
	if err != nil {
		return nil, err
	}
	return startMetrics(addr, reg, ready, withPprof, log)
}

// buildInfoCollector is the constant sluice_build_info{version,commit,goversion} 1.
func buildInfoCollector(b buildInfo) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; the labels say which build runs: release, commit, Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.gitSHA1(), "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
