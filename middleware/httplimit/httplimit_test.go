package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/middleware/httplimit"
	"github.com/sluice-rl/sluice/middleware/internal/sluicetest"
)

// TestLimiterEndToEnd: against a real sluice, N+1 requests against a limit
// of N get N 200s with decreasing RateLimit remaining, then one 429 with
// Retry-After and the RateLimit fields; another client is not affected.
func TestLimiterEndToEnd(t *testing.T) {
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			addr := sluicetest.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			defer rdb.Close()
			// A frozen clock on a minute boundary makes the times exact.
			if err := rdb.Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
				t.Fatal(err)
			}
			const n = 5
			client := "client-" + strconv.Itoa(proto)
			lim := &httplimit.Limiter{Client: rdb, Limit: n, Window: time.Minute, Name: "api",
				Key: func(r *http.Request) string { return r.Header.Get("X-Client") }}
			srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "hello")
			})))
			defer srv.Close()
			get := func(who string) *http.Response {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("X-Client", who)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				return res
			}
			// expect checks request req's status and RateLimit fields.
			expect := func(req int, res *http.Response, status int, remaining, retryAfter string) {
				t.Helper()
				if res.StatusCode != status {
					t.Fatalf("request %d: status %d, want %d", req, res.StatusCode, status)
				}
				for k, v := range map[string]string{
					"RateLimit-Policy": `"api";q=5;w=60`,
					"RateLimit":        `"api";r=` + remaining + `;t=60`,
					"Retry-After":      retryAfter,
				} {
					if got := res.Header.Get(k); got != v {
						t.Fatalf("request %d: %s %q, want %q", req, k, got, v)
					}
				}
			}
			for i := range n {
				expect(i+1, get(client), http.StatusOK, strconv.Itoa(n-1-i), "")
			}
			expect(n+1, get(client), http.StatusTooManyRequests, "0", "60")
			if res := get("someone-else"); res.StatusCode != http.StatusOK {
				t.Fatalf("another client: status %d", res.StatusCode)
			}
		})
	}
}

// TestLimiterUnavailable: with sluice unreachable, requests get 503, or go
// through with FailOpen.
func TestLimiterUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	for _, open := range []bool{false, true} {
		lim := &httplimit.Limiter{Client: rdb, Limit: 5, Window: time.Minute, FailOpen: open,
			Logger: slog.New(slog.DiscardHandler)}
		rec := httptest.NewRecorder()
		lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).
			ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		want := http.StatusServiceUnavailable
		if open {
			want = http.StatusOK
		}
		if rec.Code != want {
			t.Fatalf("FailOpen %v: status %d, want %d", open, rec.Code, want)
		}
	}
}
