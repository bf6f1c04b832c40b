package main

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// debugConfig holds the hidden flags that exist for fault-injection tests
// (cmd/sluice-chaos) and nothing else. They are not in --help, not in the
// flag table of docs/operations.md, and not settable from a config file:
//
//   - --debug-dial-map from=to,...: dial `to` whenever Raft or forwarding
//     would dial the peer address `from` (a proxy per link, so that a test
//     can cut one link between two nodes). Plain TCP only.
//   - --debug-clock-skew d: this node's wall clock, as stamped into the log
//     entries it commits as leader, is off by d (e.g. 3s or -2500ms).
type debugConfig struct {
	DialMap   map[string]string
	ClockSkew time.Duration
}

// extract removes the hidden flags from args, sets them, and returns the
// rest for the flag package. Each takes a value, as --name=value or
// --name value (one or two dashes).
func (d *debugConfig) extract(args []string) ([]string, error) {
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !isDebugFlag(name) {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return nil, fmt.Errorf("--%s: needs a value", name)
			}
			i++
			value = args[i]
		}
		if err := d.set(name, value); err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
	}
	return rest, nil
}

// isDebugFlag reports whether name (without dashes) is a hidden flag.
func isDebugFlag(name string) bool {
	return name == "debug-dial-map" || name == "debug-clock-skew"
}

func (d *debugConfig) set(name, value string) error {
	switch name {
	case "debug-clock-skew":
		skew, err := time.ParseDuration(value)
		if err != nil {
			return err
		}
		if skew < -time.Hour || skew > time.Hour {
			return fmt.Errorf("%v is beyond an hour", skew)
		}
		d.ClockSkew = skew
	case "debug-dial-map":
		m := map[string]string{}
		for _, part := range strings.Split(value, ",") {
			from, to, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				return fmt.Errorf("%q is not from=to", part)
			}
			for _, addr := range []string{from, to} {
				if _, _, err := net.SplitHostPort(addr); err != nil {
					return fmt.Errorf("%q: %w", part, err)
				}
			}
			m[from] = to
		}
		d.DialMap = m
	}
	return nil
}

// wallClock returns the node's wall clock with the skew, or nil (the
// default clock) when there is none.
func (d *debugConfig) wallClock() func() int64 {
	if d.ClockSkew == 0 {
		return nil
	}
	skew := d.ClockSkew
	return func() int64 { return time.Now().Add(skew).UnixNano() }
}

// active reports whether any hidden flag is set (main logs a warning).
func (d *debugConfig) active() bool { return d.ClockSkew != 0 || len(d.DialMap) > 0 }
