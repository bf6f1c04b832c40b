package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
)

// opsConfig holds the operational settings: TLS, memory limits, metrics and
// the configuration file. It is embedded in config.
type opsConfig struct {
	ConfigFile string

	TLSAddr       string
	TLSCertFile   string
	TLSKeyFile    string
	TLSCACertFile string

	RaftTLSCertFile   string
	RaftTLSKeyFile    string
	RaftTLSCACertFile string

	MaxKeys   int64
	MaxMemory byteSize

	MetricsAddr string
	Pprof       bool

	// certs, when set, makes the TLS configurations built from these
	// settings reload their certificates on SIGHUP (reload.go); run sets
	// it, validation leaves it nil.
	certs *reloadSet

	// origin maps a setting taken from the configuration file (and not
	// overridden on the command line) to its "file:line", for messages.
	origin map[string]string
}

// registerOps adds the operational flags to fs.
func (o *opsConfig) registerOps(fs *flag.FlagSet) {
	fs.StringVar(&o.ConfigFile, "config", "", "read settings from this file (Redis format: one 'name value' per line); flags override it")
	fs.StringVar(&o.TLSAddr, "tls-addr", "", "address of a second RESP listener, over TLS (needs --tls-cert-file and --tls-key-file)")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) of the TLS listener")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "PEM private key of the TLS listener")
	fs.StringVar(&o.TLSCACertFile, "tls-ca-cert-file", "", "PEM CA certificates: when set, TLS clients must present a certificate signed by one")
	fs.StringVar(&o.RaftTLSCertFile, "raft-tls-cert-file", "", "PEM certificate of this node for mutual TLS between peers (Raft and forwarding)")
	fs.StringVar(&o.RaftTLSKeyFile, "raft-tls-key-file", "", "PEM private key of this node for mutual TLS between peers")
	fs.StringVar(&o.RaftTLSCACertFile, "raft-tls-ca-cert-file", "", "PEM CA certificate that signs every peer's certificate")
	fs.Int64Var(&o.MaxKeys, "max-keys", 0, "most keys with live state; beyond, commands creating a key fail with -OOM (0: no limit)")
	fs.Var(&o.MaxMemory, "maxmemory", "most bytes of engine state (e.g. 100mb, 1gb); beyond, commands creating a key fail with -OOM (0: no limit)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "HTTP address for /metrics (Prometheus), /healthz and /readyz (default: off)")
	fs.BoolVar(&o.Pprof, "pprof", false, "also serve Go's profiler under /debug/pprof/ on --metrics-addr")
}

// validateOps checks the operational settings; bad reports one error.
func (c *config) validateOps(bad func(field, format string, args ...any)) {
	if c.TLSAddr != "" {
		host, _, err := net.SplitHostPort(c.TLSAddr)
		switch {
		case err != nil:
			bad("tls-addr", "%v", err)
		case c.TLSCertFile == "" || c.TLSKeyFile == "":
			bad("tls-addr", "needs --tls-cert-file and --tls-key-file")
		case strings.EqualFold(c.ProtectedMode, "yes") && !isLoopback(host) && c.RequirePass == "" && c.TLSCACertFile == "":
			bad("tls-addr", "DENIED listening on %s beyond loopback without --requirepass or client certificates (--tls-ca-cert-file); set one or start with --protected-mode no", c.TLSAddr)
		}
	} else if c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCACertFile != "" {
		bad("tls-addr", "required with --tls-cert-file, --tls-key-file or --tls-ca-cert-file")
	}
	switch countSet(c.RaftTLSCertFile, c.RaftTLSKeyFile, c.RaftTLSCACertFile) {
	case 0:
	case 3:
		if _, err := c.peerTLSConfig(); err != nil {
			bad("raft-tls-cert-file", "%v", err)
		}
	default:
		bad("raft-tls-cert-file", "--raft-tls-cert-file, --raft-tls-key-file and --raft-tls-ca-cert-file go together")
	}
	if c.MaxKeys < 0 {
		bad("max-keys", "want 0 (no limit) or more, got %d", c.MaxKeys)
	}
	if c.Pprof && c.MetricsAddr == "" {
		bad("pprof", "needs --metrics-addr")
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad("metrics-addr", "%v", err)
		}
	}
}

// byteSize is a flag holding a number of bytes, written as Redis writes
// memory sizes: a plain number, or a number with a unit, case-insensitive:
// k (1000), kb (1024), m (10^6), mb (2^20), g (10^9), gb (2^30).
type byteSize int64

func (b *byteSize) String() string {
	if b == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// parseByteSize parses a Redis memory size.
func parseByteSize(s string) (int64, error) {
	num := strings.ToLower(strings.TrimSpace(s))
	mul := int64(1)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1}} {
		if strings.HasSuffix(num, u.suffix) {
			num, mul = strings.TrimSuffix(num, u.suffix), u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || num == "" || num[0] == '+' {
		return 0, fmt.Errorf("want a size in bytes such as 1048576, 100mb or 1gb, got %q", s)
	}
	if n > math.MaxInt64/mul {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mul, nil
}
