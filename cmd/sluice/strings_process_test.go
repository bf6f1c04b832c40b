package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestClusterStringExpiry: on a 3-node cluster with a frozen clock, a
// string key's expiry is an instant of the log's clock: the key lives on
// every replica until the entry whose time reaches it and is gone on every
// replica from that entry on (their DEBUG DIGESTs, which hash the clock
// and every key's state, agree before and after),
// and a replica restored from a snapshot holds the same strings.
func TestClusterStringExpiry(t *testing.T) {
	c := newTestCluster(t, 3)
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	ctx := context.Background()
	n1 := c.client(c.nodes[0])
	do := func(p *proc, args ...any) any {
		t.Helper()
		v, err := c.client(p).Do(ctx, args...).Result()
		if err != nil && err.Error() != "redis: nil" {
			t.Fatalf("%v on %s: %v", args, p.ID, err)
		}
		return v
	}
	do(c.nodes[0], "DEBUG", "CLOCK", "FREEZE", "1893456000000")
	do(c.nodes[1], "SET", "k1", "v", "PX", "5000")
	do(c.nodes[2], "INCRBY", "k2", "7")
	do(c.nodes[2], "EXPIRE", "k2", "10", "NX")
	do(c.nodes[0], "SET", "k3", "forever")
	if v := do(c.nodes[1], "PTTL", "k1"); v != int64(5000) {
		t.Fatalf("PTTL k1 = %v", v)
	}
	before := c.sameDigest("digests with three strings", 10*time.Second)
	if !strings.HasSuffix(before, " 3") {
		t.Fatalf("digest %q: want 3 keys", before)
	}
	do(c.nodes[0], "DEBUG", "TIMEWARP", "4999")
	for _, p := range c.nodes {
		if v := do(p, "EXISTS", "k1"); v != int64(1) {
			t.Fatalf("k1 gone on %s 1 ms before its expiry", p.ID)
		}
	}
	if d := c.sameDigest("digests 1 ms before the expiry", 10*time.Second); !strings.HasSuffix(d, " 3") {
		t.Fatalf("digest %q 1 ms before k1's expiry: want 3 keys", d)
	}
	do(c.nodes[0], "DEBUG", "TIMEWARP", "1")
	for _, p := range c.nodes {
		if v := do(p, "GET", "k1"); v != nil {
			t.Fatalf("GET k1 on %s at its expiry: %v", p.ID, v)
		}
		if v := do(p, "GET", "k2"); v != "7" {
			t.Fatalf("GET k2 on %s: %v", p.ID, v)
		}
	}
	after := c.sameDigest("digests at the expiry", 10*time.Second)
	if !strings.HasSuffix(after, " 2") {
		t.Fatalf("digest %q at k1's expiry: want 2 keys", after)
	}
	// A replica restored from its snapshot (and the log after it) holds
	// the same strings.
	restarted := c.nodes[2]
	do(restarted, "RAFT.SNAPSHOT")
	do(c.nodes[0], "INCR", "k2")
	c.kill(restarted)
	c.start(restarted)
	c.waitServing(restarted)
	if v := do(restarted, "GET", "k2"); v != "8" {
		t.Fatalf("GET k2 after the restart: %v", v)
	}
	do(c.nodes[0], "DEBUG", "TIMEWARP", "5000")
	if d := c.sameDigest("digests after a restart and k2's expiry", 10*time.Second); !strings.HasSuffix(d, " 1") {
		t.Fatalf("digest %q: want only k3", d)
	}
	if v, _ := n1.Do(ctx, "TTL", "k3").Int64(); v != -1 {
		t.Fatalf("TTL k3 = %d", v)
	}
}

// TestStringsSurviveRestart: on a durable single node, string keys (values
// and expiries, on a frozen clock) survive a SIGKILL and a restart, from a
// snapshot and from the log after it.
func TestStringsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	r := killRestartAfter(t, [][]any{
		{"DEBUG", "CLOCK", "FREEZE", "1893456000000"},
		{"INCRBY", "k", "5"}, {"EXPIRE", "k", "100"}, {"SET", "s", "before"},
		{"RAFT.SNAPSHOT"},
		{"SET", "s", "after", "PX", "2500"}, {"INCR", "k"},
	})
	for _, c := range []struct {
		cmd  []any
		want any
	}{
		{[]any{"GET", "k"}, "6"}, {[]any{"PTTL", "k"}, int64(100000)},
		{[]any{"GET", "s"}, "after"}, {[]any{"PTTL", "s"}, int64(2500)}, {[]any{"TYPE", "s"}, "string"},
	} {
		if got, err := r.Do(ctx, c.cmd...).Result(); err != nil || got != c.want {
			t.Errorf("%v after the restart: %v %v, want %v", c.cmd, got, err, c.want)
		}
	}
}

// redisClient is a go-redis client of the node at addr, closed with the test.
// killRestartAfter starts a durable single node, sends it cmds (each must
// succeed; one of them writes the key k), kills it (SIGKILL) and starts it
// again on its data dir, and returns a client of the node once it reads k
// again.
func killRestartAfter(t *testing.T, cmds [][]any) *redis.Client {
	t.Helper()
	a, dir := freeSoloAddrs(t), t.TempDir()
	addr := a.addr
	args := append(a.flags(), "--data-dir", dir, "--enable-debug-command", "--log-level", "warn")
	first := startProcess(t, binary, args...)
	waitFor(t, 30*time.Second, "the node answers PING", func() bool { return pingOK(addr) })
	ctx := context.Background()
	r := redisClient(t, addr)
	for _, cmd := range cmds {
		if err := r.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	_ = first.Process.Kill()
	_, _ = first.Process.Wait()
	startProcess(t, binary, args...)
	waitFor(t, 30*time.Second, "the restarted node serves", func() bool { return r.Get(ctx, "k").Err() == nil })
	return r
}

func redisClient(t *testing.T, addr string) *redis.Client {
	r := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { r.Close() })
	return r
}

// TestNewCommandsRightAfterStart: a single durable node (make run) takes
// the commands of cluster version 2 from its first connection, new and
// restarted alike: a new group's only member raises the version before it
// calls itself ready, and a restarted one's data dir records it, so no
// INCRBY sent while the node starts or replays is refused.
func TestNewCommandsRightAfterStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := filepath.Join(t.TempDir(), "data")
	a := freeSoloAddrs(t)
	addr := a.addr
	incr := func(want int64) {
		t.Helper()
		// As soon as the port accepts: no wait for the node to serve.
		if err := testkit.Poll(10*time.Second, 5*time.Millisecond, func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
		defer c.Close()
		if got, err := c.IncrBy(context.Background(), "c", 5).Result(); err != nil || got != want {
			t.Fatalf("INCRBY c 5 right after the start: %d, %v (want %d)", got, err, want)
		}
	}
	n := startSolo(t, a, dir)
	incr(5)
	n.run.Kill()
	n = startSolo(t, a, dir)
	incr(10)
	n.run.Kill()
}
