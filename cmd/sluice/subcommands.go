package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// runToolCommand runs the subcommands that are not the server: `sluice
// version`, `sluice healthcheck` and `sluice check-config`. ok is false
// when args are a server's command line.
func runToolCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "version", "--version", "-version":
		fmt.Fprint(stdout, currentBuild())
		return 0, true
	case "healthcheck":
		return runHealthcheck(ctx, args[1:], stdout, stderr), true
	case "check-config":
		// The server's flags (--config FILE and any others), parsed and
		// validated as at start-up, without starting anything.
		if _, err := parseFlags(args[1:], stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0, true
			}
			fmt.Fprintln(stderr, "sluice check-config:", err)
			return 1, true
		}
		fmt.Fprintln(stdout, "configuration OK")
		return 0, true
	}
	return 0, false
}

// reloadOnHangup reloads the TLS certificates on each signal from hup
// until ctx ends.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, certs *reloadSet, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			n, err := certs.reload()
			if err != nil {
				log.Error("SIGHUP: reloading TLS certificates failed; keeping the previous ones", "reloaded", n, "err", err)
				continue
			}
			log.Info("SIGHUP: reloaded TLS certificates", "pairs", n)
		}
	}
}

// notifySystemd tells systemd (NOTIFY_SOCKET, Type=notify) READY=1 once
// exec serves commands, with STATUS= lines while it waits; it returns when
// ready or when ctx ends.
func notifySystemd(ctx context.Context, sd notifier, exec any, addr string, log *slog.Logger) {
	status := func(why string) {
		if err := sd.notify("STATUS=waiting: " + why); err != nil {
			log.Warn("systemd notification", "err", err)
		}
	}
	if err := waitServing(ctx, exec, 50*time.Millisecond, status); err != nil || ctx.Err() != nil {
		return // shutting down: STOPPING=1 comes instead
	}
	if err := sd.notify("READY=1\nSTATUS=serving on " + addr); err != nil {
		log.Warn("systemd notification", "err", err)
	}
}
