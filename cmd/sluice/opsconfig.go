package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
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

// raftTLS reports whether peer traffic runs over mutual TLS.
func (o *opsConfig) raftTLS() bool { return o.RaftTLSCertFile != "" }

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

// checkPeers checks --peers and that, without peer TLS, the Raft and
// forward addresses are private, naming the setting each comes from.
func (c *config) checkPeers(bad func(field, format string, args ...any)) {
	peers, err := parsePeers(c.Peers)
	if err != nil {
		bad("peers", "%v", err)
		return
	}
	if len(peers) > 0 && c.ID == "" {
		bad("id", "required with %s", c.setting("peers"))
	}
	if c.raftTLS() {
		return
	}
	if c.RaftAddr != "" {
		if err := checkPrivate(c.RaftAddr); err != nil {
			bad("raft-addr", "%v", err)
		}
	} else if p, ok := peers[c.ID]; ok {
		if err := checkPrivate(p); err != nil {
			bad("peers", "%s's Raft address: %v", c.ID, err)
		}
	}
	if c.ForwardAddr != "" {
		if err := checkPrivate(c.ForwardAddr); err != nil {
			bad("forward-addr", "%v", err)
		}
	}
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// setting names a setting in a message: "--name", or "file:line: name"
// when its value came from the configuration file.
func (o *opsConfig) setting(name string) string {
	if where, ok := o.origin[name]; ok {
		return where + ": " + name
	}
	return "--" + name
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

// applyConfigFile reads the file named by --config in args, if any, and
// sets its settings in fs, before fs parses args (so that the command line
// overrides the file). Unknown names and bad values are errors naming the
// file and line. It records where each setting not also on the command line
// came from.
func (o *opsConfig) applyConfigFile(fs *flag.FlagSet, args []string) error {
	cli, path := commandLineNames(fs, args)
	if path == "" {
		if cli["config"] {
			return errors.New("--config: needs a file name")
		}
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	o.origin = make(map[string]string)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		where := fmt.Sprintf("%s:%d", path, line)
		words, err := splitConfigLine(sc.Text())
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(words) == 0 {
			continue
		}
		name := strings.ToLower(words[0])
		fl := fs.Lookup(name)
		if fl == nil || name == "config" {
			return fmt.Errorf("%s: unknown setting %q", where, words[0])
		}
		var value string
		switch {
		case len(words) == 2:
			value = words[1]
		case len(words) == 1 && isBoolFlag(fl):
			value = "true"
		case len(words) == 1:
			return fmt.Errorf("%s: %s needs a value", where, name)
		default:
			return fmt.Errorf("%s: %s takes one value, got %d (quote a value with spaces)", where, name, len(words)-1)
		}
		if isBoolFlag(fl) {
			switch strings.ToLower(value) {
			case "yes":
				value = "true"
			case "no":
				value = "false"
			}
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s: bad value %q for %s: %v", where, value, name, err)
		}
		if !cli[name] {
			o.origin[name] = where
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// commandLineNames returns the names of the flags set in args, as the flag
// package will parse them, and the value of --config.
func commandLineNames(fs *flag.FlagSet, args []string) (map[string]bool, string) {
	names := make(map[string]bool)
	config := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		value, hasValue := "", false
		if k := strings.IndexByte(name, '='); k >= 0 {
			name, value, hasValue = name[:k], name[k+1:], true
		}
		names[name] = true
		fl := fs.Lookup(name)
		if fl != nil && !hasValue && !isBoolFlag(fl) && i+1 < len(args) {
			i++
			value = args[i]
		}
		if name == "config" {
			config = value
		}
	}
	return names, config
}

// splitConfigLine splits one line of a Redis configuration file into words:
// blank lines and lines starting with # have none; words are separated by
// spaces or tabs; "double quotes" take the escapes \n \r \t \b \a \" \\ and
// \xHH, 'single quotes' only \'. A closing quote must end its word.
func splitConfigLine(line string) ([]string, error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return nil, nil
	}
	var words []string
	i := 0
	for i < len(line) {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i >= len(line) {
			break
		}
		var w strings.Builder
		switch q := line[i]; q {
		case '"', '\'':
			i++
			closed := false
			for i < len(line) {
				ch := line[i]
				switch {
				case ch == '\\' && q == '"' && i+1 < len(line):
					i++
					switch e := line[i]; e {
					case 'n':
						w.WriteByte('\n')
					case 'r':
						w.WriteByte('\r')
					case 't':
						w.WriteByte('\t')
					case 'b':
						w.WriteByte('\b')
					case 'a':
						w.WriteByte('\a')
					case 'x':
						if i+2 < len(line) {
							if v, err := strconv.ParseUint(line[i+1:i+3], 16, 8); err == nil {
								w.WriteByte(byte(v))
								i += 2
								break
							}
						}
						w.WriteByte('x')
					default:
						w.WriteByte(e)
					}
				case ch == '\\' && q == '\'' && i+1 < len(line) && line[i+1] == '\'':
					i++
					w.WriteByte('\'')
				case ch == q:
					closed = true
				default:
					w.WriteByte(ch)
				}
				i++
				if closed {
					break
				}
			}
			if !closed {
				return nil, errors.New("unbalanced quotes")
			}
			if i < len(line) && line[i] != ' ' && line[i] != '\t' {
				return nil, errors.New("a closing quote must be followed by a space")
			}
		default:
			for i < len(line) && line[i] != ' ' && line[i] != '\t' {
				w.WriteByte(line[i])
				i++
			}
		}
		words = append(words, w.String())
	}
	return words, nil
}
