package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// TestClusterTrackingFollower: a tracking connection to a follower is
// invalidated when another node changes the key: the follower's engine tells
// its tracker as it applies the replicated log. A cluster node answers
// CLUSTER SLOTS with the one slot range (rueidis asks it after TRACKING).
func TestClusterTrackingFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := newTestClusterWith(t, 3, healthy)
	c.waitServing(c.nodes...)
	leader := c.leader()
	var followers []*proc
	for _, p := range c.nodes {
		if p != leader {
			followers = append(followers, p)
		}
	}
	conn, err := respwire.Dial(followers[0].RESP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	do := func(args ...string) string {
		t.Helper()
		v, err := conn.Do(10*time.Second, args...)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return v.Text(respwire.WithLengths)
	}
	if got := do("CLUSTER", "SLOTS"); !strings.HasPrefix(got, "*1 [*") || !strings.Contains(got, ":0 :16383 ") {
		t.Fatalf("CLUSTER SLOTS on a cluster node: %s", got)
	}
	do("HELLO", "3")
	if got := do("CLIENT", "TRACKING", "ON"); got != "+OK" {
		t.Fatalf("CLIENT TRACKING ON: %s", got)
	}
	ctx := context.Background()
	for _, changer := range []*proc{leader, followers[1]} {
		do("RL.PEEK", "tracked")
		if err := c.client(changer).Do(ctx, "RL.FIXED", "tracked", 100, "1h").Err(); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		v, err := conn.ReadReply()
		if err != nil {
			t.Fatalf("no invalidation after a change on %s: %v", changer.ID, err)
		}
		if got, want := v.Text(respwire.WithLengths), ">2 [$10 invalidate *1 [$7 tracked]]"; got != want {
			t.Fatalf("after a change on %s: %s, want %s", changer.ID, got, want)
		}
	}
}
