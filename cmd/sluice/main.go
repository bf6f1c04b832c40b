// Command sluice is the rate-limit server: it parses flags, wires the RESP
// server to an executor, and shuts down on SIGINT or SIGTERM.
package main

import (
	"context"
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

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/resp"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// run starts the server and blocks until ctx is done.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := cfg.logger(stderr)
	// The engine's state is pointer-free, so a collection costs little
	// however many keys there are: collect early and keep RSS near the
	// live data instead of Go's default of twice it.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
	}
	eng := engine.New(engine.Config{Shards: cfg.Shards, MaxLogLimit: cfg.MaxLogLimit})

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", cfg.Addr, err)
	}
	exec, closeExec, persistent, err := newExecutor(ctx, cfg, eng, ln.Addr().String(), log)
	if err != nil {
		ln.Close()
		return err
	}
	defer closeExec()

	srv := resp.NewServer(resp.Config{
		RequirePass: cfg.RequirePass,
		EnableDebug: bool(cfg.EnableDebug),
		Limits:      cfg.Limits,
		MaxKeyLen:   cfg.MaxKeyLen,
		MaxLogLimit: cfg.MaxLogLimit,
		MaxClients:  cfg.MaxClients,
		Persistent:  persistent,
		Version:     version,
		Logger:      log,
	}, exec)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("sluice ready", "addr", ln.Addr().String(), "version", version, "persistent", persistent)

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Close(shutdownCtx)
}
