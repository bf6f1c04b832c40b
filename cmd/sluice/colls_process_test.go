package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// TestClusterCollections: on a 3-node cluster with a frozen clock, random
// sequences of hash, sorted set and list commands sent to every node, with
// expiries passing by DEBUG TIMEWARP, leave every replica with the same
// DEBUG DIGEST; a replica restored from a snapshot (format 4's collection
// records) and the log after it too.
func TestClusterCollections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newTestCluster(t, 3)
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	ctx := context.Background()
	clients := []*redis.Client{c.client(c.nodes[0]), c.client(c.nodes[1]), c.client(c.nodes[2])}
	if err := clients[0].Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(32, 3))
	keys := []string{"h1", "h2", "z1", "z2", "l1", "l2"}
	live := clients
	run := func(n int) {
		for range n {
			k := keys[r.IntN(len(keys))]
			m := "m" + strconv.Itoa(r.IntN(40))
			var args []any
			switch k[0] {
			case 'h':
				args = []any{"HINCRBY", k, m, r.IntN(9) - 4}
				if r.IntN(4) == 0 {
					args = []any{"HDEL", k, m}
				}
			case 'z':
				args = []any{"ZADD", k, r.IntN(100), m}
				if r.IntN(4) == 0 {
					args = []any{"ZREMRANGEBYSCORE", k, "-inf", r.IntN(50)}
				}
			default:
				args = []any{"LPUSH", k, m}
				if r.IntN(4) == 0 {
					args = []any{"LTRIM", k, 0, r.IntN(20)}
				}
			}
			if r.IntN(20) == 0 {
				args = []any{"PEXPIRE", k, 1 + r.IntN(3000)}
			}
			// Right after the kill below (of the leader, maybe) a command may
			// meet the election: CLUSTERDOWN or UNCERTAIN until a new leader
			// is ready. It is sent again; the replicas' digests are what is
			// compared, and a command applied twice changes them alike.
			cl := live[r.IntN(len(live))]
			err := cl.Do(ctx, args...).Err()
			for end := time.Now().Add(20 * time.Second); err != nil && time.Now().Before(end) &&
				(strings.HasPrefix(err.Error(), "CLUSTERDOWN") || strings.HasPrefix(err.Error(), "UNCERTAIN")); {
				time.Sleep(20 * time.Millisecond) // a poll's pause, not a wait for time to pass
				err = cl.Do(ctx, args...).Err()
			}
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if r.IntN(40) == 0 {
				if err := clients[0].Do(ctx, "DEBUG", "TIMEWARP", r.IntN(1000)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	run(400)
	d1 := c.sameDigest("digests after random collection commands", 20*time.Second)
	if strings.HasSuffix(d1, " 0") {
		t.Fatalf("digest %q: no keys left, the test tests nothing", d1)
	}
	restarted := c.nodes[2]
	if err := clients[2].Do(ctx, "RAFT.SNAPSHOT").Err(); err != nil {
		t.Fatal(err)
	}
	run(100)
	c.kill(restarted)
	live = clients[:2]
	run(100)
	c.start(restarted)
	c.waitServing(restarted)
	c.sameDigest("digests after a replica's restart from its snapshot", 20*time.Second)
	for _, k := range keys {
		want, _ := clients[0].Do(ctx, "TYPE", k).Text()
		if got, _ := c.client(restarted).Do(ctx, "TYPE", k).Text(); got != want {
			t.Errorf("TYPE %s: %s on the restarted node, %s on n1", k, got, want)
		}
	}
}

// TestHIncrByAcknowledgedAcrossRestart: clients on every node of a 3-node
// cluster HINCRBY one field while a node is killed and restarted: every
// acknowledged increment is counted once, and no more were applied than
// were sent (an error that may have applied counts as possibly applied).
func TestHIncrByAcknowledgedAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newTestCluster(t, 3)
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	ctx, stop := context.WithCancel(context.Background())
	var acked, maybe atomic.Int64
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		r := c.client(p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := r.Do(ctx, "HINCRBY", "bucket", "hits", 1).Err()
				switch {
				case err == nil:
					acked.Add(1)
				case ctx.Err() != nil:
					maybe.Add(1)
					return
				case strings.HasPrefix(err.Error(), "CLUSTERDOWN"):
					// certainly not applied
				default:
					maybe.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	waitAcked := func(n int64) {
		if err := pollUntil(20*time.Second, func() bool { return acked.Load() >= n }); err != nil {
			t.Fatalf("%d acknowledged, want %d", acked.Load(), n)
		}
	}
	waitAcked(200)
	victim := c.leader()
	c.kill(victim)
	waitAcked(acked.Load() + 200)
	c.start(victim)
	c.waitServing(victim)
	waitAcked(acked.Load() + 200)
	stop()
	wg.Wait()
	c.sameDigest("digests after the load", 20*time.Second)
	for _, p := range c.nodes {
		v, err := c.client(p).Do(context.Background(), "HGET", "bucket", "hits").Int64()
		if err != nil {
			t.Fatal(err)
		}
		if v < acked.Load() || v > acked.Load()+maybe.Load() {
			t.Fatalf("%s: hits = %d after %d acknowledged and %d that may have applied", p.ID, v, acked.Load(), maybe.Load())
		}
	}
	t.Logf("%d acknowledged, %d possibly applied", acked.Load(), maybe.Load())
}

func pollUntil(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// TestLargeCollectionsRestartAndBackup: a hash, a sorted set and a list of
// 100,000 elements each, on a durable node: built and read whole while
// another client keeps sending GETs (their latencies are logged, as a
// measure, not asserted), kept across a SIGKILL and restart (from a
// snapshot and the log after it) and across a backup restored into a new
// node, digest for digest.
func TestLargeCollectionsRestartAndBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 100_000
	c := newTestCluster(t, 1)
	c.waitServing(c.nodes...)
	node := c.nodes[0]
	ctx := context.Background()
	r := c.client(node)
	// A frozen clock: the digest (which holds the clock) is the same
	// before and after the restart.
	if err := r.Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}

	// Other clients' latency while the collections are built and read.
	probeCtx, stopProbe := context.WithCancel(ctx)
	var lat []time.Duration
	var probeWG sync.WaitGroup
	probeWG.Add(1)
	go func() {
		defer probeWG.Done()
		pr := c.client(node)
		for probeCtx.Err() == nil {
			start := time.Now()
			if err := pr.Incr(probeCtx, "probe").Err(); err != nil && probeCtx.Err() == nil {
				t.Errorf("probe: %v", err)
				return
			}
			lat = append(lat, time.Since(start))
		}
	}()
	build := time.Now()
	for i := 0; i < n; i += 1000 {
		p := r.Pipeline()
		h := []any{"HSET", "bighash"}
		z := []any{"ZADD", "bigzset"}
		l := []any{"RPUSH", "biglist"}
		for j := i; j < i+1000; j++ {
			h = append(h, "field:"+strconv.Itoa(j), strconv.Itoa(j))
			z = append(z, j, "member:"+strconv.Itoa(j))
			l = append(l, "element:"+strconv.Itoa(j))
		}
		p.Do(ctx, h...)
		p.Do(ctx, z...)
		p.Do(ctx, l...)
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	buildTook := time.Since(build)
	read := time.Now()
	for range 3 {
		if m, err := r.HGetAll(ctx, "bighash").Result(); err != nil || len(m) != n {
			t.Fatalf("HGETALL: %d fields, %v", len(m), err)
		}
		if m, err := r.ZRangeWithScores(ctx, "bigzset", 0, -1).Result(); err != nil || len(m) != n {
			t.Fatalf("ZRANGE: %d members, %v", len(m), err)
		}
		if m, err := r.LRange(ctx, "biglist", 0, -1).Result(); err != nil || len(m) != n {
			t.Fatalf("LRANGE: %d elements, %v", len(m), err)
		}
	}
	readTook := time.Since(read)
	stopProbe()
	probeWG.Wait()
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("built 3 x %d elements in %s, read each whole 3 times in %s; another client's INCR meanwhile: %d calls, p50 %s, p99 %s, max %s",
			n, buildTook.Round(time.Millisecond), readTook.Round(time.Millisecond), len(lat),
			lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	}
	if err := r.Do(ctx, "RAFT.SNAPSHOT").Err(); err != nil {
		t.Fatal(err)
	}
	// After the snapshot, through the log only.
	if err := r.HSet(ctx, "bighash", "after", "snapshot").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.ZRemRangeByScore(ctx, "bigzset", "-inf", "9").Err(); err != nil {
		t.Fatal(err)
	}
	want, err := r.Do(ctx, "DEBUG", "DIGEST").Text()
	if err != nil {
		t.Fatal(err)
	}
	counts := func(r *redis.Client) string {
		h, _ := r.HLen(ctx, "bighash").Result()
		z, _ := r.ZCard(ctx, "bigzset").Result()
		l, _ := r.LLen(ctx, "biglist").Result()
		return fmt.Sprintf("%d %d %d", h, z, l)
	}
	wantCounts := fmt.Sprintf("%d %d %d", n+1, n-10, n)
	if got := counts(r); got != wantCounts {
		t.Fatalf("counts %s, want %s", got, wantCounts)
	}
	c.kill(node)
	c.start(node)
	c.waitServing(node)
	r2 := c.client(node)
	if got, _ := r2.Do(ctx, "DEBUG", "DIGEST").Text(); got != want {
		// a read through the log moved nothing: the digest is the state's
		t.Fatalf("digest after the restart %s, before %s", got, want)
	}
	if got := counts(r2); got != wantCounts {
		t.Fatalf("counts after the restart %s, want %s", got, wantCounts)
	}
	if v, _ := r2.HGet(ctx, "bighash", "field:77777").Result(); v != "77777" {
		t.Fatalf("HGET after the restart: %q", v)
	}

	// Backup, then restore into a new node.
	want, _ = r2.Do(ctx, "DEBUG", "DIGEST").Text()
	archive := filepath.Join(t.TempDir(), "big.bk")
	if out, err := runSluice(t, "backup", "--addr", node.RESP, "--out", archive); err != nil {
		t.Fatalf("sluice backup: %v\n%s", err, out)
	}
	nc := layoutTestCluster(t, proccluster.Config{Nodes: 1})
	nd := nc.nodes[0]
	if out, err := runSluice(t, "restore", "--in", archive, "--data-dir", nd.Dir, "--id", nd.ID, "--peers", nc.Peers); err != nil {
		t.Fatalf("sluice restore: %v\n%s", err, out)
	}
	nc.startAll()
	nc.settle(60*time.Second, 100*time.Millisecond, "the restored node's digest", func() string {
		got, err := nc.client(nd).Do(ctx, "DEBUG", "DIGEST").Text()
		if err != nil {
			return err.Error()
		}
		if got != want {
			return fmt.Sprintf("digest %s, the backup's %s", got, want)
		}
		return ""
	})
	nc.waitServing(nd)
	if got := counts(nc.client(nd)); got != wantCounts {
		t.Fatalf("counts of the restored node %s, want %s", got, wantCounts)
	}
}
