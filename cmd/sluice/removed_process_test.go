package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// removedText starts the reply of a node removed from the cluster.
const removedText = "ERR this node was removed from the cluster (RAFT.REMOVE)"

// TestRemovedNodeSaysSo: a node removed from a cluster of three (--shards
// 3) while it runs learns it: it answers commands with an error naming the
// removal (not applied: the others keep serving and the key is charged by
// them only), RAFT.STATUS shows removed:1 in every group, and /readyz says
// not ready; after a restart on the same data dir it still knows.
func TestRemovedNodeSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	metrics := map[string]string{}
	c := newTestClusterWith(t, 3, func(nodes []*proc) {
		for _, p := range nodes {
			metrics[p.ID] = freeAddr(t)
			p.Extra = append(p.Extra, "--shards", strconv.Itoa(shardCount), "--metrics-addr", metrics[p.ID])
		}
	})
	c.waitServing(c.nodes...)
	n1, n3 := c.nodes[0], c.nodes[2]
	if err := c.admin(n1, "RAFT.REMOVE", n3.ID); err != nil {
		c.dumpLogs()
		t.Fatalf("remove %s: %v", n3.ID, err)
	}
	check := func(when string) {
		t.Helper()
		c.settle(10*time.Second, 50*time.Millisecond, n3.ID+" knowing it was removed "+when, func() string {
			conn, err := respwire.Dial(n3.RESP, time.Second)
			if err != nil {
				return err.Error()
			}
			defer conn.Close()
			// A read until it knows (a write before then would apply).
			v, err := conn.Do(5*time.Second, "GET", "removed")
			if err != nil {
				return err.Error()
			}
			if !strings.HasPrefix(v.Str, removedText) {
				return "GET: " + v.Text(respwire.NoLengths)
			}
			if v, err = conn.Do(5*time.Second, "INCRBY", "removed", "1"); err != nil || !strings.HasPrefix(v.Str, removedText) {
				return fmt.Sprintf("INCRBY once GET is refused: %s, %v", v.Text(respwire.NoLengths), err)
			}
			for g := range shardCount {
				st, err := c.raftStatus(n3, g)
				if err != nil {
					return err.Error()
				}
				if st["removed"] != "1" {
					return fmt.Sprintf("group %d: RAFT.STATUS removed:%q", g, st["removed"])
				}
			}
			res, err := http.Get("http://" + metrics[n3.ID] + "/readyz")
			if err != nil {
				return err.Error()
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK || !strings.Contains(string(body), "removed") {
				return fmt.Sprintf("/readyz: %d %s", res.StatusCode, body)
			}
			return ""
		})
	}
	check("while running")
	// The others serve, and the removed node's refusals changed nothing.
	r := c.client(n1)
	if v, err := r.IncrBy(context.Background(), "removed", 1).Result(); err != nil || v != 1 {
		t.Fatalf("INCRBY on %s after the removal: %d, %v (want 1: the removed node applied nothing)", n1.ID, v, err)
	}
	c.kill(n3)
	c.start(n3)
	check("after a restart")
}
