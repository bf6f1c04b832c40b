package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter routes hashicorp's hclog (Raft's logger) to slog. Raft is
// chatty at debug and trace, so messages below min are dropped before any
// formatting happens.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	min  slog.Level
	args []any // implied arguments
}

func newHCLogAdapter(l *slog.Logger, min slog.Level) hclog.Logger {
	return &hclogAdapter{l: l, name: "raft", min: min}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	sl := slogLevel(level)
	if sl < a.min || !a.l.Enabled(context.Background(), sl) {
		return
	}
	all := make([]any, 0, 2+len(a.args)+len(args))
	all = append(all, "component", a.name)
	all = append(all, a.args...)
	for _, v := range args {
		all = append(all, hclogValue(v))
	}
	a.l.Log(context.Background(), sl, msg, all...)
}

// hclogValue renders hclog's formatting wrappers, which slog knows nothing
// of.
func hclogValue(v any) any {
	switch x := v.(type) {
	case hclog.Format:
		if len(x) > 0 {
			if format, ok := x[0].(string); ok {
				return fmt.Sprintf(format, x[1:]...)
			}
		}
		return fmt.Sprint(x...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(x))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(x))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(x))
	case hclog.Quote:
		return fmt.Sprintf("%q", string(x))
	}
	return v
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	sl := slogLevel(level)
	return sl >= a.min && a.l.Enabled(context.Background(), sl)
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

// SetLevel is ignored: the level is fixed by the node's configuration.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case a.min <= slog.LevelDebug-4:
		return hclog.Trace
	case a.min <= slog.LevelDebug:
		return hclog.Debug
	case a.min <= slog.LevelInfo:
		return hclog.Info
	case a.min <= slog.LevelWarn:
		return hclog.Warn
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(a.l.With("component", a.name).Handler(), max(a.min, slog.LevelInfo))
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
