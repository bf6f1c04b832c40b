// Command sluice is the rate-limit server: it parses flags, wires the RESP
// server to an executor, and shuts down on SIGINT or SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/gctune"
	"github.com/sluice-rl/sluice/resp"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// The first SIGINT or SIGTERM stops gracefully (ctx); a second one
	// stops at once (now).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	now, stopNow := context.WithCancel(context.Background())
	defer stopNow()
	go func() {
		<-sigs
		stop()
		<-sigs
		stopNow()
	}()
	if code, ok := runToolCommand(ctx, os.Args[1:], os.Stdout, os.Stderr); ok {
		stop()
		os.Exit(code)
	}
	if err := runGraceful(ctx, now, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// handoverer is an executor that can hand its work over before it stops
// (cluster.Host).
type handoverer interface {
	Handover(ctx context.Context) error
}

// runGraceful starts the server and blocks until ctx is done, then stops
// gracefully; when now ends during the graceful stop, the stop
// skips what is left of the handover and the draining of connections.
func runGraceful(ctx, now context.Context, args []string, stderr io.Writer) error {
	if ran, err := runTool(ctx, args, os.Stdout, stderr); ran { // backupcmd.go
		return err
	}
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := cfg.logger(stderr)
	cfg.certs = &reloadSet{} // SIGHUP reloads TLS certificates (reload.go)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHangup(ctx, hup, cfg.certs, log)
	build := currentBuild()
	// The engine's state is pointer-free, so a collection costs little
	// however many keys there are: collect early and keep RSS near the
	// live data instead of Go's default of twice it. But a small live heap
	// then leaves so little headroom that per-request garbage (Raft
	// entries, msgpack, arguments) runs the collector many times a second:
	// the tuner raises the percent after each collection until the
	// headroom is at least --gc-min-headroom.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
		if cfg.GCMinHeadroom > 0 {
			tuner, err := gctune.Start(ctx, gctune.Config{Base: cfg.GCPercent, MinHeadroom: int64(cfg.GCMinHeadroom)})
			if err != nil {
				return err
			}
			defer tuner.Stop()
		}
	}
	// The tracker hears of changed keys from the engine, whoever changes
	// them (this node's clients or, on a cluster, the replicated log).
	tracker := resp.NewTracker(resp.DefaultTrackingMaxKeys)
	// One engine per Raft group. A group's engine holds its share of the
	// node's key and memory limits (the slots, hence the keys, spread
	// evenly): each group's replicas must decide alike, so no limit can
	// be shared between groups.
	// Each engine runs its scripts with a runner of its own (its group's
	// keys are the local ones); the server asks the first to compile.
	engines := make([]*engine.Engine, cfg.Shards)
	runners := make([]*resp.ScriptRunner, cfg.Shards)
	scripts := resp.NewScriptRunner(resp.ScriptConfig{MaxSteps: cfg.ScriptMaxSteps, MaxMemory: int64(cfg.ScriptMaxMemory),
		MaxKeyLen: cfg.MaxKeyLen, MaxLogLimit: cfg.MaxLogLimit, MaxValueLen: cfg.MaxValueLen,
		Groups: cfg.Shards, Logger: log, NoNative: !cfg.ScriptNative})
	for g := range engines {
		runners[g] = scripts.ForGroup(g)
		engines[g] = engine.New(engine.Config{Stripes: cfg.LockStripes, MaxLogLimit: cfg.MaxLogLimit, MaxValueLen: cfg.MaxValueLen, MaxCollectionLen: cfg.MaxCollLen,
			MaxKeys: share(cfg.MaxKeys, cfg.Shards), MaxBytes: share(int64(cfg.MaxMemory), cfg.Shards), Watcher: tracker,
			Scripts: runners[g], ScriptCacheMax: cfg.ScriptCacheMax})
	}
	var engView resp.EngineView = engines[0]
	if len(engines) > 1 {
		engView = resp.Engines(engines)
	}

	// Envoy's rate limit service: its rules load before anything listens,
	// so a bad rules directory is a start-up error.
	rlsSvc, err := newRLS(cfg, log)
	if err != nil {
		return err
	}

	var tlsCfg *tls.Config
	if cfg.TLSAddr != "" {
		if tlsCfg, err = cfg.clientTLSConfig(); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", cfg.Addr, err)
	}
	var tlsLn net.Listener
	if tlsCfg != nil {
		if tlsLn, err = net.Listen("tcp", cfg.TLSAddr); err != nil {
			ln.Close()
			return fmt.Errorf("listen on --tls-addr %s: %w", cfg.TLSAddr, err)
		}
	}
	exec, closeExec, persistent, err := newExecutor(ctx, cfg, engines, ln.Addr().String(), log)
	if err != nil {
		ln.Close()
		if tlsLn != nil {
			tlsLn.Close()
		}
		return err
	}
	defer closeExec()

	srv := resp.NewServer(resp.Config{
		RequirePass: cfg.RequirePass,
		EnableDebug: bool(cfg.EnableDebug),
		Limits:      cfg.Limits,
		MaxKeyLen:   cfg.MaxKeyLen,
		MaxLogLimit: cfg.MaxLogLimit,
		MaxValueLen: cfg.MaxValueLen,
		MaxClients:  cfg.MaxClients,
		Persistent:  persistent,
		AppendFsync: cfg.Fsync.value,
		LogStore:    cfg.RaftLog.value,
		Version:     build.Version,
		GitSHA1:     build.gitSHA1(),
		GitDirty:    build.Dirty,
		Logger:      log,
		Engine:      engView,
		Tracker:     tracker,
		Cluster:     cfg.Peers != "" || cfg.NoBootstrap,
		Redirect:    cfg.Redirect,
		RLS:         rlsSvc,
		Scripts:     runners[0],
	}, exec)
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	if tlsLn != nil {
		go func() { served <- srv.ServeTLS(tlsLn, tlsCfg) }()
		log.Info("TLS listener", "addr", tlsLn.Addr().String(), "client_certificates", cfg.TLSCACertFile != "")
	}
	stopRLS, err := startRLS(ctx, cfg, rlsSvc, exec, log)
	if err != nil {
		closeWithin(5*time.Second, func(ctx context.Context) { _ = srv.Close(ctx) })
		return err
	}
	defer closeWithin(5*time.Second, stopRLS)
	if cfg.MetricsAddr != "" {
		var extra []prometheus.Collector
		if rlsSvc != nil {
			extra = append(extra, rlsSvc.Collector())
		}
		ms, err := startOpsMetrics(cfg.MetricsAddr, cfg.Pprof, srv, exec, log, build, extra...)
		if err != nil {
			closeWithin(5*time.Second, func(ctx context.Context) { _ = srv.Close(ctx) })
			return err
		}
		defer closeWithin(5*time.Second, ms.close)
		log.Info("metrics", "addr", ms.ln.Addr().String())
	}
	log.Info("sluice ready", "addr", ln.Addr().String(), "version", build.Version, "commit", build.Commit, "persistent", persistent)
	// systemd (Type=notify): READY=1 once the node serves, STOPPING=1 on
	// the way out (sdnotify.go).
	sd := notifier{socket: os.Getenv("NOTIFY_SOCKET")}
	if sd.socket != "" {
		go notifySystemd(ctx, sd, exec, ln.Addr().String(), log)
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	if err := sd.notify("STOPPING=1"); err != nil {
		log.Warn("systemd notification", "err", err)
	}
	// A graceful stop (docs/operations.md, "Stopping a node"): hand the
	// Raft leaderships over while still serving, then stop reading
	// commands, answer those read (forwarded to the new leaders), close
	// the connections; closeExec then stops Raft.
	start := time.Now()
	graceCtx, cancel := context.WithTimeout(now, cfg.ShutdownTimeout)
	defer cancel()
	if h, ok := exec.(handoverer); ok {
		log.Info("shutting down: handing leaderships over")
		if err := h.Handover(graceCtx); err != nil {
			log.Warn("handover incomplete; stopping anyway", "err", err)
		}
	}
	log.Info("shutting down: answering the commands taken in", "handover", time.Since(start).Round(time.Millisecond))
	if err := srv.Drain(graceCtx); err != nil {
		// Past --shutdown-timeout, or a second signal: close what is
		// left. A connection still in the executor ends when closeExec
		// stops it (its command answers as on a crash), so do not wait.
		log.Warn("shutting down: commands still running; closing their connections", "err", err)
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancelClose()
		_ = srv.Close(closeCtx)
		log.Info("shutting down: connections closed", "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	closeCtx, cancelClose := context.WithTimeout(now, 5*time.Second)
	defer cancelClose()
	err = srv.Close(closeCtx)
	log.Info("shutting down: connections closed", "took", time.Since(start).Round(time.Millisecond))
	return err
}

// share is a group's part of a node-wide limit: limit/groups, rounded up;
// 0 (no limit) stays 0.
func share[T int | int64](limit T, groups int) T {
	if limit <= 0 || groups <= 1 {
		return limit
	}
	return (limit + T(groups) - 1) / T(groups)
}

// closeWithin calls stop with a context that ends after d: a bound on one
// part of the shutdown.
func closeWithin(d time.Duration, stop func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stop(ctx)
}
