package main

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// TestClusterWatch: WATCH through a three-node cluster. A key watched on a
// follower and changed through another node (the leader, the other
// follower) makes the follower's EXEC reply nil and run nothing, since the
// key's group decides when it applies the EXEC; unchanged, EXEC runs. The
// same in database 1 (a change of the name in database 0 does not count).
func TestClusterWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := newTestClusterWith(t, 3, healthy)
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	leader := c.leader()
	var followers []*proc
	for _, p := range c.nodes {
		if p != leader {
			followers = append(followers, p)
		}
	}
	dial := func(p *proc) func(args ...string) string {
		conn, err := respwire.Dial(p.RESP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return func(args ...string) string {
			t.Helper()
			v, err := conn.Do(10*time.Second, args...)
			if err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			return v.Text(respwire.WithLengths)
		}
	}
	w := dial(followers[0])
	others := map[string]func(args ...string) string{"the leader": dial(leader), "the other follower": dial(followers[1])}
	for _, db := range []string{"0", "1"} {
		w("SELECT", db)
		for name, o := range others {
			o("SELECT", db)
			for _, change := range []bool{false, true} {
				if got := w("WATCH", "wk"); got != "+OK" {
					t.Fatalf("WATCH: %s", got)
				}
				w("GET", "wk")
				if change {
					if got := o("INCR", "wk"); got[0] != ':' {
						t.Fatalf("INCR through %s: %s", name, got)
					}
					if db == "1" {
						o("SELECT", "0")
						o("SET", "wk", "elsewhere") // another database's wk
						o("SELECT", db)
					}
				} else if db == "1" {
					o("SELECT", "0")
					o("SET", "wk", "elsewhere")
					o("SELECT", db)
				}
				w("MULTI")
				w("SET", "wk", "tx")
				got := w("EXEC")
				if change && got != "*-1" || !change && got != "*1 [+OK]" {
					t.Fatalf("db %s, change %v through %s: EXEC replied %s", db, change, name, got)
				}
				if v := w("GET", "wk"); change && v == "$2 tx" || !change && v != "$2 tx" {
					t.Fatalf("db %s, change %v through %s: GET wk after EXEC: %s", db, change, name, v)
				}
				w("DEL", "wk")
			}
		}
	}
}
