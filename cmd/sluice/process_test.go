package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// binary is the sluice binary built once for the process tests.
var binary string

// quietLogger drops go-redis's pool messages about the nodes the tests kill.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	if bin := os.Getenv("SLUICE_BIN"); bin != "" {
		// A binary built beforehand (the Makefile's, or a developer's).
		binary = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sluice-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns 127.0.0.1:port on a port that was free a moment ago,
// below the ephemeral range, so that no node's outgoing connection takes
// it before the node it is meant for binds it (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := sluiceproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is one sluice process of a test cluster.
type proc = proccluster.Node

// testCluster is a cluster of sluice processes (internal/testkit/proccluster)
// whose errors fail the test.
type testCluster struct {
	*proccluster.Cluster
	t     *testing.T
	nodes []*proc
}

// testFlags are every test node's flags after its own addresses and peers.
func testFlags(logLevel string) []string {
	return []string{"--enable-debug-command", "--cluster-timeout", "2s", "--log-level", logLevel}
}

// healthyClusterTimeout is the --cluster-timeout of the tests whose cluster
// no fault touches and that must see every command answered (differential
// tests): testFlags' 2s lets a loaded CI machine (two cores, -race, another
// package's tests beside) turn a slow commit into UNCERTAIN, which is the
// truthful answer but not the one such a test compares.
const healthyClusterTimeout = "20s"

// healthy is the setup of newTestClusterWith for such a test: every node
// gets --cluster-timeout healthyClusterTimeout.
func healthy(nodes []*proc) {
	for _, p := range nodes {
		p.Extra = append(p.Extra, "--cluster-timeout", healthyClusterTimeout)
	}
}

func newTestCluster(t *testing.T, n int) *testCluster {
	return newTestClusterWith(t, n, nil)
}

// newTestClusterWith is newTestCluster with setup called on the nodes
// before they start (to give them more flags).
func newTestClusterWith(t *testing.T, n int, setup func([]*proc)) *testCluster {
	t.Helper()
	c := layoutTestCluster(t, proccluster.Config{Nodes: n, Setup: setup})
	c.startAll()
	return c
}

// layoutTestCluster lays out the cluster cfg describes without starting
// it, with the tests' defaults for what cfg leaves empty (binary, a
// temporary data dir, testFlags at warn); every node is killed when the
// test ends.
func layoutTestCluster(t *testing.T, cfg proccluster.Config) *testCluster {
	t.Helper()
	if cfg.Bin == "" {
		cfg.Bin = binary
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Flags == nil {
		cfg.Flags = testFlags("warn")
	}
	pc, err := proccluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pc.Close()
		if t.Failed() {
			logNodeTails(t, pc.Nodes)
		}
	})
	return &testCluster{Cluster: pc, t: t, nodes: pc.Nodes}
}

// nodeLogTail is how much of each node's log a failed test prints.
const nodeLogTail = 4 << 10

// logNodeTails logs the end of each node's log, so a failure seen only in
// CI's output says what the nodes saw (an election, a slow disk).
func logNodeTails(t *testing.T, nodes []*proc) {
	for _, n := range nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		if len(b) > nodeLogTail {
			b = b[len(b)-nodeLogTail:]
		}
		t.Logf("%s's log (last %d bytes):\n%s", n.ID, len(b), b)
	}
}

// startAll starts every node.
func (c *testCluster) startAll() {
	c.t.Helper()
	for _, p := range c.nodes {
		c.start(p)
	}
}

// start starts p (again, on its data dir).
func (c *testCluster) start(p *proc) {
	c.t.Helper()
	if err := c.Start(p); err != nil {
		c.t.Fatal(err)
	}
}

// kill sends SIGKILL and reaps the process.
func (c *testCluster) kill(p *proc) { c.Kill(p) }

func (c *testCluster) client(p *proc) *redis.Client {
	r := redis.NewClient(&redis.Options{Addr: p.RESP, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, PoolSize: 4})
	c.t.Cleanup(func() { r.Close() })
	return r
}

// waitServing polls until every given node answers a read through the log.
func (c *testCluster) waitServing(nodes ...*proc) {
	c.t.Helper()
	for _, p := range nodes {
		if !p.Running() {
			c.t.Fatalf("node %s not serving: it is down", p.ID)
		}
	}
	if err := c.WaitServing(context.Background(), 30*time.Second, 5*time.Second, nodes...); err != nil {
		c.dumpLogs()
		c.t.Fatal(err)
	}
}

// settle calls problem every interval until it returns "" (settled);
// after timeout it dumps the nodes' logs and fails the test with what
// last went wrong.
func (c *testCluster) settle(timeout, interval time.Duration, what string, problem func() string) {
	c.t.Helper()
	err := testkit.Poll(timeout, interval, func() error {
		if p := problem(); p != "" {
			return errors.New(p)
		}
		return nil
	})
	if err != nil {
		c.dumpLogs()
		c.t.Fatalf("%s never settled: %v", what, err)
	}
}

// refusedStart runs bin with args and fails the test (what names the
// run) unless it exits with a non-zero status within 30 s: a node that
// must refuse to start. It returns what the process wrote to stdout and
// stderr.
func refusedStart(t *testing.T, what, bin string, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || ctx.Err() != nil {
		t.Fatalf("%s: %v (want a non-zero exit)\nstdout:\n%s\nstderr:\n%s", what, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// sameDigest waits until every running node has applied the same
// entries (within timeout) and returns their common DEBUG DIGEST.
func (c *testCluster) sameDigest(what string, timeout time.Duration) string {
	c.t.Helper()
	var common string
	c.settle(timeout, 50*time.Millisecond, what, func() string {
		var seen []string
		for _, p := range c.nodes {
			if p.Process() == nil {
				continue
			}
			d, err := c.client(p).Do(context.Background(), "DEBUG", "DIGEST").Text()
			if err != nil {
				return err.Error()
			}
			seen = append(seen, d)
		}
		for _, d := range seen[1:] {
			if d != seen[0] {
				return fmt.Sprintf("digests differ: %q", seen)
			}
		}
		common = seen[0]
		return ""
	})
	return common
}

func (c *testCluster) leader() *proc {
	c.t.Helper()
	p, err := c.Leader(context.Background(), 0, 20*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *testCluster) dumpLogs() {
	for _, p := range c.nodes {
		b, _ := os.ReadFile(p.LogPath)
		c.t.Logf("--- %s log:\n%s", p.ID, b)
	}
}

// TestClusterProcessesFailover: three real processes, clients on every node
// hammer one key while the leader is killed with SIGKILL; the acknowledged
// admissions never exceed the limit, state carries over, a full restart
// keeps it, and a lone node refuses with CLUSTERDOWN.
//
// It runs with each log store; the wal store in everysec mode, since a
// SIGKILL (a process crash) must lose nothing in that mode either.
func TestClusterProcessesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	for _, flags := range [][]string{
		{"--raft-log", "bolt", "--fsync", "always"},
		{"--raft-log", "wal", "--fsync", "everysec"},
	} {
		t.Run(flags[1]+"-"+flags[3], func(t *testing.T) { testClusterProcessesFailover(t, flags) })
	}
}

func testClusterProcessesFailover(t *testing.T, flags []string) {
	c := newTestClusterWith(t, 3, func(ps []*proc) {
		for _, p := range ps {
			p.Extra = append(p.Extra, flags...)
		}
	})
	c.waitServing(c.nodes...)
	ctx := context.Background()
	first := c.client(c.nodes[0])
	// A frozen, replicated clock: no refill, so the limit is exact.
	if err := first.Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	const limit = 150
	var admitted, denied, failed atomic.Int64
	load := func(p *proc, n int, wg *sync.WaitGroup) {
		defer wg.Done()
		r := c.client(p)
		for i := 0; i < n; i++ {
			res, err := r.Do(ctx, "RL.TOKEN", "shared", limit, "1/d").Int64Slice()
			switch {
			case err != nil:
				failed.Add(1)
				time.Sleep(20 * time.Millisecond)
			case res[0] == 1:
				admitted.Add(1)
			default:
				denied.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		for k := 0; k < 3; k++ {
			wg.Add(1)
			go load(p, 40, &wg)
		}
	}
	time.Sleep(200 * time.Millisecond)
	old := c.leader()
	c.kill(old)
	wg.Wait()
	t.Logf("phase 1: admitted %d, denied %d, failed %d", admitted.Load(), denied.Load(), failed.Load())
	if admitted.Load() > limit {
		t.Fatalf("admitted %d > limit %d", admitted.Load(), limit)
	}

	var alive []*proc
	for _, p := range c.nodes {
		if p != old {
			alive = append(alive, p)
		}
	}
	c.waitServing(alive...)
	// Spend the rest of the limit through the survivors: the total of
	// acknowledged admissions may never pass the limit.
	wg = sync.WaitGroup{}
	for _, p := range alive {
		wg.Add(1)
		go load(p, limit, &wg)
	}
	wg.Wait()
	if admitted.Load() > limit {
		t.Fatalf("after failover admitted %d > limit %d", admitted.Load(), limit)
	}
	peek := func(p *proc) []int64 {
		t.Helper()
		res, err := c.client(p).Do(ctx, "RL.PEEK", "shared").Int64Slice()
		if err != nil {
			t.Fatalf("RL.PEEK on %s: %v", p.ID, err)
		}
		return res
	}
	before := peek(alive[0])
	if before[2] != 0 {
		t.Fatalf("after %d requests the bucket still has %d tokens", limit*2, before[2])
	}

	// Restart every node (SIGKILL first): state and the frozen clock are kept.
	c.start(old)
	c.waitServing(c.nodes...)
	for _, p := range c.nodes {
		c.kill(p)
	}
	for _, p := range c.nodes {
		c.start(p)
	}
	c.waitServing(c.nodes...)
	after := peek(c.nodes[2])
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("state after a full restart %v, before %v", after, before)
	}

	// A lone node never decides. Once it knows it has no majority (it is
	// not the leader: a leader that has not yet noticed would append the
	// command to its log, and then the truthful answer is UNCERTAIN), it
	// refuses with CLUSTERDOWN: certainly not applied.
	c.kill(c.nodes[0])
	c.kill(c.nodes[1])
	lone := c.client(c.nodes[2])
	testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		st, err := lone.Do(ctx, "RAFT.STATUS").StringSlice()
		if err == nil && len(st) >= 4 && st[3] != "leader" {
			return nil
		}
		return fmt.Errorf("the lone node still leads: %v %v", st, err)
	})
	start := time.Now()
	err := c.client(c.nodes[2]).Do(ctx, "RL.TOKEN", "lone", 10, "1/s").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "CLUSTERDOWN") {
		t.Fatalf("lone node: err %v, want CLUSTERDOWN", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("lone node took %s to refuse (cluster timeout 2s)", d)
	}
}

// waitNewestVersion waits until every group of the given nodes runs the
// cluster version their binary supports. A cluster this build bootstraps
// runs it from its first ready leader; one of an older build (0631f27,
// the upgrade test's) starts at version 1 and its leaders raise it once
// every member has said what it supports (about a second), and until then
// the commands of later releases (the string commands, the rate limit
// service) are refused.
func (c *testCluster) waitNewestVersion(nodes ...*proc) {
	c.t.Helper()
	c.settle(30*time.Second, 50*time.Millisecond, "the newest cluster version", func() string {
		for _, p := range nodes {
			for g := 0; ; g++ {
				st, err := c.raftStatus(p, g)
				if err != nil {
					if g > 0 && strings.Contains(err.Error(), "invalid group") {
						break
					}
					return fmt.Sprintf("%s: RAFT.STATUS %d: %v", p.ID, g, err)
				}
				if st["cluster_version"] != st["cluster_version_supported"] {
					return fmt.Sprintf("%s group %d: cluster version %s of %s", p.ID, g, st["cluster_version"], st["cluster_version_supported"])
				}
			}
		}
		return ""
	})
}
