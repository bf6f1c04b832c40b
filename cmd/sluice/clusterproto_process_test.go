package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/internal/pyredis"
	"github.com/sluice-rl/sluice/internal/slots"
)

// waitClusterTopology polls until every node's CLUSTER SLOTS lists one
// range, all 16384 slots, mastered by the Raft leader with the two others
// as its replicas (every member's address announced through the log), and
// its CLUSTER INFO says the cluster is ok.
func (c *testCluster) waitClusterTopology() *proc {
	c.t.Helper()
	var leader *proc
	c.settle(30*time.Second, 50*time.Millisecond, "the cluster topology", func() string {
		leader = c.leader()
		for _, p := range c.nodes {
			r := c.client(p)
			got, err := r.ClusterSlots(context.Background()).Result()
			switch {
			case err != nil:
				return fmt.Sprintf("%s: CLUSTER SLOTS: %v", p.ID, err)
			case len(got) != 1 || got[0].Start != 0 || got[0].End != slots.Count-1 || len(got[0].Nodes) != len(c.nodes):
				return fmt.Sprintf("%s: CLUSTER SLOTS %+v", p.ID, got)
			case got[0].Nodes[0].Addr != leader.RESP:
				return fmt.Sprintf("%s: CLUSTER SLOTS master %s, leader %s", p.ID, got[0].Nodes[0].Addr, leader.RESP)
			}
			info, err := r.ClusterInfo(context.Background()).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok\r\n") {
				return fmt.Sprintf("%s: CLUSTER INFO %q %v", p.ID, info, err)
			}
		}
		return ""
	})
	return leader
}

// follower returns a node that is not leader.
func (c *testCluster) follower(leader *proc) *proc {
	for _, p := range c.nodes {
		if p != leader {
			return p
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// TestRedisClusterClients: three real processes, with and without
// --redirect; the cluster-aware clients Redis users have connect with their
// defaults and route RL.TOKEN by its key, and a limit shared by clients on
// every node admits exactly its limit.
func TestRedisClusterClients(t *testing.T) {
	eachRedirect(t, func(t *testing.T, redirect bool) {
		c := newTestClusterWith(t, 3, func(nodes []*proc) {
			if redirect {
				for _, p := range nodes {
					p.Extra = append(p.Extra, "--redirect")
				}
			}
		})
		c.waitServing(c.nodes...)
		leader := c.waitClusterTopology()
		follower := c.follower(leader)
		ctx := context.Background()

		// A plain client on a follower: forwarded, or MOVED to the leader.
		err := c.client(follower).Do(ctx, "RL.TOKEN", "foo", "5", "1/h").Err()
		if redirect {
			if want := "MOVED 12182 " + leader.RESP; err == nil || err.Error() != want {
				t.Fatalf("plain client on a follower: %v, want %s", err, want)
			}
		} else if err != nil {
			t.Fatalf("plain client on a follower: %v", err)
		}
		// Keyless commands run on a follower either way.
		if err := c.client(follower).Do(ctx, "DBSIZE").Err(); err != nil {
			t.Fatalf("DBSIZE on a follower: %v", err)
		}

		// go-redis's ClusterClient, seeded with a follower, defaults.
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{follower.RESP}})
		defer cc.Close()
		got, err := cc.Do(ctx, "RL.TOKEN", "gr:key", "100", "1/h").Int64Slice()
		if err != nil || len(got) != 5 || got[0] != 1 || got[2] != 99 {
			t.Fatalf("ClusterClient RL.TOKEN: %v %v", got, err)
		}

		// rueidis, defaults (client-side caching on): CLUSTER SLOTS
		// makes it a cluster client routing by key.
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{follower.RESP}})
		if err != nil {
			t.Fatalf("rueidis: %v", err)
		}
		defer rc.Close()
		rgot, err := rc.Do(ctx, rc.B().Arbitrary("RL.TOKEN").Keys("ru:key").Args("100", "1/h").Build()).AsIntSlice()
		if err != nil || len(rgot) != 5 || rgot[0] != 1 || rgot[2] != 99 {
			t.Fatalf("rueidis RL.TOKEN: %v %v", rgot, err)
		}
		if _, isCluster := rc.Nodes()[leader.RESP]; !isCluster || len(rc.Nodes()) != 3 {
			t.Fatalf("rueidis nodes %v: want the three members", rc.Nodes())
		}

		// A limit shared by cluster clients seeded on every node and
		// plain clients on every node admits exactly its limit.
		const limit = 40
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for _, p := range c.nodes {
			ccp := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.RESP}})
			defer ccp.Close()
			type doer interface {
				Do(ctx context.Context, args ...any) *redis.Cmd
			}
			clients := []doer{ccp}
			if !redirect {
				clients = append(clients, c.client(p))
			}
			for _, cl := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range limit {
						res, err := cl.Do(ctx, "RL.TOKEN", "{shared}limit", strconv.Itoa(limit), "1/h").Int64Slice()
						if err != nil {
							t.Errorf("shared limit: %v", err)
							return
						}
						if res[0] == 1 {
							mu.Lock()
							admitted++
							mu.Unlock()
						}
					}
				}()
			}
		}
		wg.Wait()
		if admitted != limit {
			t.Fatalf("a limit of %d shared across nodes admitted %d", limit, admitted)
		}

		// redis-cli -c, pointed at a follower, follows MOVED.
		if path, err := exec.LookPath("redis-cli"); err == nil {
			host, port, _ := strings.Cut(follower.RESP, ":")
			out, err := exec.Command(path, "-c", "-h", host, "-p", port, "RL.TOKEN", "cli:key", "7", "1/h").CombinedOutput()
			if err != nil || strings.Fields(string(out))[0] != "1" || strings.Contains(string(out), "MOVED") {
				t.Fatalf("redis-cli -c: %v\n%s", err, out)
			}
			if got := strings.Fields(string(out)); len(got) != 5 || got[1] != "7" || got[2] != "6" {
				t.Fatalf("redis-cli -c RL.TOKEN: %q", got)
			}
		} else {
			t.Log("no redis-cli: skipping its check")
		}

		// redis-py's RedisCluster (Debian's python3-redis).
		if python := pyredis.Find("redis.cluster"); python != "" {
			host, port, _ := strings.Cut(follower.RESP, ":")
			out, err := exec.Command(python, "testdata/rediscluster.py", host, port, "py:key").CombinedOutput()
			slot := strconv.Itoa(slots.Of([]byte("py:key")))
			want := "nodes 3\nslot " + slot + "\ntoken [1, 100, 99, 0, 3600000]\nkeyslot " + slot
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Fatalf("redis-py RedisCluster: %v\n%s\nwant:\n%s", err, out, want)
			}
		} else {
			t.Log("no python3 with redis-py: skipping RedisCluster")
		}

		// ioredis's Cluster, when .ci/run has installed it.
		if dir, node := os.Getenv("SLUICE_NODE_MODULES"), nodeBinary(); dir != "" && node != "" {
			host, port, _ := strings.Cut(follower.RESP, ":")
			out, err := runNodeScript(t, node, dir, "testdata/iocluster.mjs", host, port)
			want := "masters 1\nall 3\ntoken [1,10,9,0,3600000]\nexists 1"
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Fatalf("ioredis Cluster: %v\n%s\nwant:\n%s", err, out, want)
			}
		} else {
			t.Log("SLUICE_NODE_MODULES or node not set up: skipping ioredis Cluster")
		}

		// redis-benchmark --cluster reads CLUSTER NODES and, in Redis
		// 7.0, refuses a cluster of fewer than two masters: with one
		// Raft group it must find exactly the one (the leader) and say
		// so. A short bounded run against the leader then has no error.
		if path, err := exec.LookPath("redis-benchmark"); err == nil {
			host, port, _ := strings.Cut(follower.RESP, ":")
			out, _ := exec.Command(path, "--cluster", "-h", host, "-p", port, "-n", "100", "-q",
				"RL.TOKEN", "bench:__rand_int__", "1000", "1/s").CombinedOutput()
			if !strings.Contains(string(out), "Invalid cluster: 1 node(s).") {
				t.Fatalf("redis-benchmark --cluster with one group:\n%s", out)
			}
			host, port, _ = strings.Cut(leader.RESP, ":")
			out, err = exec.Command(path, "-h", host, "-p", port, "-n", "2000", "-c", "4", "-r", "1000", "-q",
				"RL.TOKEN", "bench:__rand_int__", "1000", "1/s").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "requests per second") || strings.Contains(strings.ToLower(string(out)), "error") {
				t.Fatalf("redis-benchmark: %v\n%s", err, out)
			}
		} else {
			t.Log("no redis-benchmark: skipping its check")
		}
	})
}

// nodeBinary returns the node executable, or "".
func nodeBinary() string {
	path, err := exec.LookPath("node")
	if err != nil {
		return ""
	}
	return path
}

// runNodeScript runs a script placed beside dir's node_modules (Node looks
// packages up from the script's folder).
func runNodeScript(t *testing.T, node, dir, script string, args ...string) ([]byte, error) {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "sluice-"+filepath.Base(script))
	if err := os.WriteFile(copyPath, src, 0o600); err != nil {
		t.Fatal(err)
	}
	return exec.Command(node, append([]string{copyPath}, args...)...).CombinedOutput()
}
