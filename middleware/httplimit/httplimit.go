// Package httplimit is net/http middleware that rate-limits requests with
// sluice, over go-redis.
//
// Each request is charged one unit of a per-client limit with one RL.*
// command (RL.FIXED by default). An allowed request goes on to the wrapped
// handler; a denied one gets 429 Too Many Requests with Retry-After. Both
// carry the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers):
//
//	RateLimit-Policy: "name";q=<limit>;w=<window seconds>
//	RateLimit: "name";r=<remaining>;t=<seconds until the quota is restored>
//
// all built from sluice's five-integer reply.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	lim := &httplimit.Limiter{Client: rdb, Limit: 100, Window: time.Minute}
//	http.ListenAndServe(":8080", lim.Handler(mux))
package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Doer runs one command: *redis.Client, *redis.ClusterClient and
// redis.UniversalClient all are.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Limiter is the middleware's configuration. Client, Limit and Window are
// required; the rest have defaults. A Limiter must not be changed once
// Handler was called.
type Limiter struct {
	// Client talks to sluice.
	Client Doer
	// Limit is the number of requests allowed per Window and client.
	Limit int64
	// Window is the window's length (at least a millisecond).
	Window time.Duration
	// Command is the limiter command: "RL.FIXED" (default), "RL.SLIDING"
	// or "RL.LOG" (all take a limit and a window).
	Command string
	// Name is the policy's name in the RateLimit fields (default "default").
	Name string
	// Prefix is put before every key (default "rl:").
	Prefix string
	// Key returns the client's identity (default: the remote address's
	// host; behind a proxy, read the header it sets instead).
	Key func(*http.Request) string
	// FailOpen lets requests through when sluice cannot be asked (it is
	// down, or replied an error). By default they get 503.
	FailOpen bool
	// Logger receives errors talking to sluice (default slog.Default()).
	Logger *slog.Logger
}

// Decision is sluice's reply to one request's charge.
type Decision struct {
	Allowed    bool
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration // 0 when allowed; negative when never
	ResetAfter time.Duration // until the client's state is back to initial
}

// Allow charges one unit to key's limit.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	cmd := l.Command
	if cmd == "" {
		cmd = "RL.FIXED"
	}
	prefix := l.Prefix
	if prefix == "" {
		prefix = "rl:"
	}
	ms := max(l.Window.Milliseconds(), 1)
	v, err := l.Client.Do(ctx, cmd, prefix+key, l.Limit, strconv.FormatInt(ms, 10)+"ms").Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("httplimit: %s %s: %w", cmd, prefix+key, err)
	}
	if len(v) != 5 {
		return Decision{}, fmt.Errorf("httplimit: %s replied %d integers, want 5", cmd, len(v))
	}
	return Decision{
		Allowed:    v[0] == 1,
		Limit:      v[1],
		Remaining:  v[2],
		RetryAfter: time.Duration(v[3]) * time.Millisecond,
		ResetAfter: time.Duration(v[4]) * time.Millisecond,
	}, nil
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// SetHeaders writes d's RateLimit-Policy and RateLimit fields, and
// Retry-After when d is a denial.
func (l *Limiter) SetHeaders(h http.Header, d Decision) {
	name := l.Name
	if name == "" {
		name = "default"
	}
	w := max(ceilSeconds(l.Window), 1)
	// t: when the quota is restored; for a denial, when a request is
	// allowed again.
	t := ceilSeconds(d.ResetAfter)
	if !d.Allowed {
		t = ceilSeconds(d.RetryAfter)
		if d.RetryAfter < 0 {
			t = w // can never be allowed: tell the client the window
		}
		t = max(t, 1)
		h.Set("Retry-After", strconv.FormatInt(t, 10))
	}
	h.Set("RateLimit-Policy", strconv.Quote(name)+";q="+strconv.FormatInt(d.Limit, 10)+";w="+strconv.FormatInt(w, 10))
	h.Set("RateLimit", strconv.Quote(name)+";r="+strconv.FormatInt(d.Remaining, 10)+";t="+strconv.FormatInt(t, 10))
}

// Handler returns next behind the limit.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	keyOf := l.Key
	if keyOf == nil {
		keyOf = remoteHost
	}
	logger := l.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := l.Allow(r.Context(), keyOf(r))
		if err != nil {
			logger.Error("rate limiter unavailable", "err", err)
			if l.FailOpen {
				next.ServeHTTP(w, r)
				return
			}
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		l.SetHeaders(w.Header(), d)
		if !d.Allowed {
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// remoteHost is the host of the request's remote address.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
