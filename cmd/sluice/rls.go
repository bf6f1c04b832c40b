package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluice-rl/sluice/cluster"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rls/server"
)

// Envoy's rate limit service (SPEC section 12): its flags, and starting its
// rules, its gRPC and HTTP front ends and the SIGHUP reload.

// rlsConfig holds the --rls-* settings.
type rlsConfig struct {
	RLSConfigDir     string
	RLSAddr          string
	RLSHTTPAddr      string
	RLSShadow        bool
	RLSHeaders       bool
	RLSTLSCertFile   string
	RLSTLSKeyFile    string
	RLSTLSCACertFile string
}

// registerRLS adds the --rls-* flags to fs.
func (r *rlsConfig) registerRLS(fs *flag.FlagSet) {
	fs.StringVar(&r.RLSConfigDir, "rls-config", "", "directory of envoyproxy/ratelimit rule files (*.yaml, *.yml; one domain each) for Envoy's rate limit service")
	fs.StringVar(&r.RLSAddr, "rls-addr", "", "gRPC address of Envoy's rate limit service, envoy.service.ratelimit.v3.RateLimitService (needs --rls-config; default: off)")
	fs.StringVar(&r.RLSHTTPAddr, "rls-http-addr", "", "HTTP address of the rate limit service's POST /json endpoint (needs --rls-config; default: off)")
	fs.BoolVar(&r.RLSShadow, "rls-shadow", false, "every rule is a shadow rule for charging and the overall code is always OK (envoyproxy/ratelimit's SHADOW_MODE)")
	fs.BoolVar(&r.RLSHeaders, "rls-response-headers", false, "add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset for the descriptor closest to its limit (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&r.RLSTLSCertFile, "rls-tls-cert-file", "", "PEM certificate (chain): serve --rls-addr and --rls-http-addr over TLS")
	fs.StringVar(&r.RLSTLSKeyFile, "rls-tls-key-file", "", "PEM private key of the rate limit service's TLS")
	fs.StringVar(&r.RLSTLSCACertFile, "rls-tls-ca-cert-file", "", "PEM CA certificates: when set, rate limit clients must present a certificate signed by one")
}

// validateRLS checks the --rls-* settings.
func (c *config) validateRLS(bad func(field, format string, args ...any)) {
	if (c.RLSAddr != "" || c.RLSHTTPAddr != "" || c.RLSShadow || c.RLSHeaders || c.RLSTLSCertFile != "") && c.RLSConfigDir == "" {
		bad("rls-config", "required with --rls-addr, --rls-http-addr, --rls-shadow, --rls-response-headers and --rls-tls-*")
	}
	if c.RLSConfigDir != "" {
		if st, err := os.Stat(c.RLSConfigDir); err != nil {
			bad("rls-config", "%v", err)
		} else if !st.IsDir() {
			bad("rls-config", "%s is not a directory", c.RLSConfigDir)
		}
	}
	for _, a := range []struct{ name, addr string }{{"rls-addr", c.RLSAddr}, {"rls-http-addr", c.RLSHTTPAddr}} {
		if a.addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a.addr)
		switch {
		case err != nil:
			bad(a.name, "%v", err)
		case strings.EqualFold(c.ProtectedMode, "yes") && !isLoopback(host) && c.RLSTLSCACertFile == "":
			bad(a.name, "DENIED listening on %s beyond loopback without client certificates (--rls-tls-ca-cert-file); set them or start with --protected-mode no", a.addr)
		}
	}
	switch countSet(c.RLSTLSCertFile, c.RLSTLSKeyFile) {
	case 0:
		if c.RLSTLSCACertFile != "" {
			bad("rls-tls-ca-cert-file", "needs --rls-tls-cert-file and --rls-tls-key-file")
		}
	case 1:
		bad("rls-tls-cert-file", "--rls-tls-cert-file and --rls-tls-key-file go together")
	default:
		if _, err := c.rlsTLSConfig(); err != nil {
			bad("rls-tls-cert-file", "%v", err)
		}
	}
}

// rlsTLSConfig is the front ends' TLS configuration, nil without TLS.
func (c *config) rlsTLSConfig() (*tls.Config, error) {
	if c.RLSTLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.RLSTLSCertFile, c.RLSTLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("with %s %s: %w", c.setting("rls-tls-key-file"), c.RLSTLSKeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if err := c.verifyClients(cfg, c.RLSTLSCACertFile, "rls-tls-ca-cert-file"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// newRLS loads the rules (nil, nil without --rls-config).
func newRLS(cfg *config, log *slog.Logger) (*rls.Service, error) {
	if cfg.RLSConfigDir == "" {
		return nil, nil
	}
	return rls.New(rls.Config{Dir: cfg.RLSConfigDir, Shadow: cfg.RLSShadow, MaxLogLimit: cfg.MaxLogLimit, MaxKeyLen: cfg.MaxKeyLen, ResponseHeaders: cfg.RLSHeaders, Log: log})
}

// startRLS starts the front ends the flags ask for and reloads the rules
// on SIGHUP; the returned function stops them all.
func startRLS(ctx context.Context, cfg *config, svc *rls.Service, exec rls.Executor, log *slog.Logger) (func(context.Context), error) {
	if svc == nil {
		return func(context.Context) {}, nil
	}
	tlsCfg, err := cfg.rlsTLSConfig()
	if err != nil {
		return nil, err
	}
	scfg := server.Config{Service: svc, Exec: exec, TLS: tlsCfg, Timeout: cfg.ClusterTimeout + cfg.ClusterTimeout/2, Log: log}
	if host, ok := exec.(*cluster.Host); ok {
		scfg.Ready = host.Ready // as /readyz
	} else {
		scfg.Timeout = -1 // in memory: a decision never waits, so no timer per call
	}
	var closers []func(context.Context)
	stop := func(ctx context.Context) {
		for _, c := range closers {
			c(ctx)
		}
	}
	if cfg.RLSAddr != "" {
		g, err := server.ListenGRPC(cfg.RLSAddr, scfg)
		if err != nil {
			return nil, err
		}
		closers = append(closers, g.Close)
		log.Info("rls gRPC listener", "addr", g.Addr(), "tls", tlsCfg != nil)
	}
	if cfg.RLSHTTPAddr != "" {
		h, err := server.ListenHTTP(cfg.RLSHTTPAddr, scfg)
		if err != nil {
			stop(context.Background())
			return nil, err
		}
		closers = append(closers, h.Close)
		log.Info("rls HTTP listener", "addr", h.Addr(), "tls", tlsCfg != nil)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_, _ = svc.Reload() // logs and counts its outcome
			}
		}
	}()
	closers = append(closers, func(context.Context) { signal.Stop(hup) })
	return stop, nil
}
