package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// sluice healthcheck: the probe a container's HEALTHCHECK runs, since a
// minimal image has no curl or redis-cli. docs/operations.md, "Health
// check", is its reference.

// healthcheckConfig is what the probe needs to know of the server.
type healthcheckConfig struct {
	Addr        string
	MetricsAddr string
	Password    string
	Timeout     time.Duration
}

// runHealthcheck checks a running node and returns the exit code: 0 when
// it serves, 1 when not (or when it cannot be reached), 2 for bad flags.
// With a metrics address it asks /readyz, otherwise it sends PING (after
// AUTH when a password is set).
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	hc, err := parseHealthcheckFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice healthcheck:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, hc.Timeout)
	defer cancel()
	var msg string
	if hc.MetricsAddr != "" {
		msg, err = checkReadyz(ctx, dialable(hc.MetricsAddr))
	} else {
		msg, err = checkPing(ctx, dialable(hc.Addr), hc.Password)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice healthcheck: not ready:", err)
		return 1
	}
	fmt.Fprintln(stdout, msg)
	return 0
}

// parseHealthcheckFlags reads --addr, --metrics-addr and --requirepass from
// the command line, and those the command line leaves unset from --config
// (the server's file, whose other settings are ignored here).
func parseHealthcheckFlags(args []string, stderr io.Writer) (*healthcheckConfig, error) {
	hc := &healthcheckConfig{}
	var configPath string
	fs := flag.NewFlagSet("sluice healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&hc.Addr, "addr", "127.0.0.1:6379", "the node's RESP address (0.0.0.0 is asked on 127.0.0.1)")
	fs.StringVar(&hc.MetricsAddr, "metrics-addr", "", "the node's metrics address: when set, ask /readyz instead of sending PING")
	fs.StringVar(&hc.Password, "requirepass", "", "the password to AUTH with before PING (default: the environment variable SLUICE_PASSWORD)")
	fs.DurationVar(&hc.Timeout, "timeout", 3*time.Second, "give up after this long")
	fs.StringVar(&configPath, "config", "", "the server's configuration file: addr, metrics-addr and requirepass are read from it unless given here")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if configPath != "" {
		fromFile, err := readHealthcheckSettings(configPath)
		if err != nil {
			return nil, err
		}
		for name, v := range fromFile {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return nil, fmt.Errorf("%s: %s: %w", configPath, name, err)
				}
				set[name] = true
			}
		}
	}
	if !set["requirepass"] {
		hc.Password = os.Getenv("SLUICE_PASSWORD")
	}
	if hc.Timeout <= 0 {
		return nil, fmt.Errorf("--timeout: want a positive duration, got %s", hc.Timeout)
	}
	return hc, nil
}

// readHealthcheckSettings returns addr, metrics-addr and requirepass from
// a configuration file in the server's format (configfile.go).
func readHealthcheckSettings(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		words, err := splitConfigLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if len(words) != 2 {
			continue
		}
		switch name := strings.ToLower(words[0]); name {
		case "addr", "metrics-addr", "requirepass":
			out[name] = words[1]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return out, nil
}

// dialable turns a listening address into one to dial: an unspecified
// host (0.0.0.0, ::, none) becomes the loopback address.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if ip != nil && ip.To4() == nil {
			return net.JoinHostPort("::1", port)
		}
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// checkReadyz asks a node's /readyz: nil for 200, else the node's reason.
func checkReadyz(ctx context.Context, metricsAddr string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/readyz", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimPrefix(strings.TrimSpace(string(body)), "not ready: ")
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/readyz answered %d: %s", resp.StatusCode, text)
	}
	return "/readyz: " + text, nil
}

// checkPing sends PING (after AUTH when password is set): nil for PONG.
func checkPing(ctx context.Context, addr, password string) (string, error) {
	deadline, _ := ctx.Deadline()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	c := respwire.NewConn(nc)
	defer c.Close()
	timeout := time.Until(deadline)
	if password != "" {
		v, err := c.Do(timeout, "AUTH", password)
		if err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
		if v.Kind != respwire.SimpleString {
			return "", fmt.Errorf("AUTH: %s", v.Text(respwire.NoLengths))
		}
	}
	v, err := c.Do(time.Until(deadline), "PING")
	if err != nil {
		return "", fmt.Errorf("PING: %w", err)
	}
	if v.Kind != respwire.SimpleString || v.Str != "PONG" {
		return "", fmt.Errorf("PING answered %s", v.Text(respwire.NoLengths))
	}
	return "PING: PONG", nil
}
