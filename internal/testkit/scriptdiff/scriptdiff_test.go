package scriptdiff

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// startRedis starts a redis-server (StartRedis) and connects to it.
func startRedis(t *testing.T) *Conn {
	t.Helper()
	c, err := Dial(StartRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHarnessOnTwoRedisServers runs every library on two redis-servers: they
// must agree, so the comparisons that make room for the clock are not
// stricter than two identical servers; and every script call must get a
// reply that is not an error, so the sequences call the scripts as their
// libraries do.
func TestHarnessOnTwoRedisServers(t *testing.T) {
	scripts, err := LoadScripts("../../../resp/testdata/scripts")
	if err != nil {
		t.Fatal(err)
	}
	a, b := &Side{Name: "redis-a", Conn: startRedis(t)}, &Side{Name: "redis-b", Conn: startRedis(t)}
	for _, lib := range Libraries(false) {
		t.Run(lib.Name, func(t *testing.T) {
			rep := Run(t, scripts, lib, a, b, Options{Seeds: 2, Steps: 200, FlushEvery: 30, Flush: true})
			if rep.Calls < 200 {
				t.Fatalf("only %d calls compared", rep.Calls)
			}
		})
	}
}

// TestCompareTTL: a remaining time may be lower on redis-server by the
// time elapsed, no more, and the other elements must be equal.
func TestCompareTTL(t *testing.T) {
	cmp := TTLAt(1)
	for _, c := range []struct {
		a, b string
		ok   bool
	}{
		{"*2\r\n:3\r\n:99000\r\n", "*2\r\n:3\r\n:100000\r\n", true},
		{"*2\r\n:3\r\n:90000\r\n", "*2\r\n:3\r\n:100000\r\n", false},
		{"*2\r\n:4\r\n:100000\r\n", "*2\r\n:3\r\n:100000\r\n", false},
		{"*2\r\n$-1\r\n:-2\r\n", "*2\r\n$-1\r\n:-2\r\n", true},
		{"*2\r\n$-1\r\n:-2\r\n", "*2\r\n$-1\r\n:-1\r\n", false},
	} {
		if err := cmp(c.a, c.b, 2*time.Second); (err == nil) != c.ok {
			t.Errorf("TTLAt(1)(%q, %q) = %v, want ok %v", c.a, c.b, err, c.ok)
		}
	}
}

// recorder is a testing.TB whose Fatalf records the failure and ends the
// goroutine, so a test can run Run and see it fail.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Log(...any) {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestHarnessCatchesDifference: Run fails when the second server's state
// differs (a counter the first server lacks), naming the call.
func TestHarnessCatchesDifference(t *testing.T) {
	scripts, err := LoadScripts("../../../resp/testdata/scripts")
	if err != nil {
		t.Fatal(err)
	}
	a, b := &Side{Name: "redis-a", Conn: startRedis(t)}, &Side{Name: "redis-b", Conn: startRedis(t)}
	for _, lib := range Libraries(false) {
		if lib.Name != "rate-limit-redis" {
			continue
		}
		for _, s := range []*Side{a, b} {
			if _, err := s.Conn.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Conn.Do("SET", "rl:10.0.0.1", "41", "EX", "5000"); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(rec, scripts, lib, a, b, Options{Seeds: 1, Steps: 100})
		}()
		<-done
		if !strings.Contains(rec.failed, "rl:10.0.0.1") {
			t.Fatalf("Run did not fail on the differing counter: %q", rec.failed)
		}
		return
	}
	t.Fatal("no library rate-limit-redis")
}
