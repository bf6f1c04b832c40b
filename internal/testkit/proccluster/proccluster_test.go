package proccluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// fakeSluice writes a script that prints its arguments, one a line
// between an "args" and an "end" line, and then sleeps: a node whose
// flags the test reads from its log.
func fakeSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-sluice")
	script := "#!/bin/sh\necho args\nfor a in \"$@\"; do echo \"$a\"; done\necho end\nexec sleep 600\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startArgs waits for n's log to hold the arguments of a whole start, and
// returns the last one's.
func startArgs(t *testing.T, n *Node) []string {
	t.Helper()
	var args []string
	testkit.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			return err
		}
		text := string(b)
		i := strings.LastIndex(text, "args\n")
		if i < 0 || !strings.HasSuffix(text, "\nend\n") {
			return fmt.Errorf("%s's log has no complete start yet: %q", n.ID, text)
		}
		args = strings.Split(strings.TrimSuffix(text[i+len("args\n"):], "\nend\n"), "\n")
		return nil
	})
	return args
}

// flag returns the value of --name in args, and whether it is there.
func flag(args []string, name string) (string, bool) {
	i := slices.Index(args, name)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

func newFake(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	cfg.Bin = fakeSluice(t)
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, n := range c.Nodes {
		if err := os.MkdirAll(filepath.Dir(n.LogPath), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestFlags: a node gets its own flags, --peers, the proxies of its peers'
// Raft and forward ports (and spares), --shards, then Config.Flags, then
// its Extra; its log starts with the header.
func TestFlags(t *testing.T) {
	c := newFake(t, Config{Nodes: 3, Shards: 3, Proxies: true, Spares: true, Flags: []string{"--common", "c"},
		Header: func(n *Node) string { return "--- starting " + n.ID },
		Setup:  func(ns []*Node) { ns[0].Extra = []string{"--extra", "x"} }})
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		args := startArgs(t, n)
		want := []string{"--id", n.ID, "--addr", n.RESP, "--raft-addr", n.Raft, "--forward-addr", n.Fwd, "--data-dir", n.Dir, "--peers", c.Peers}
		if !slices.Equal(args[:len(want)], want) {
			t.Errorf("%s: args %q, want them to start %q", n.ID, args, want)
		}
		dm, _ := flag(args, "--debug-dial-map")
		if got := len(strings.Split(dm, ",")); got != 2*4 {
			t.Errorf("%s: %d proxied addresses, want 8 (2 peers, 4 ports each): %s", n.ID, got, dm)
		}
		for _, peer := range c.Nodes {
			if peer != n && (!strings.Contains(dm, peer.Raft+"=") || !strings.Contains(dm, peer.Fwd+"=")) {
				t.Errorf("%s: the dial map %s lacks %s's addresses", n.ID, dm, peer.ID)
			}
		}
		if s, _ := flag(args, "--shards"); s != "3" || slices.Index(args, "--shards") > slices.Index(args, "--common") {
			t.Errorf("%s: --shards %q", n.ID, s)
		}
		extra, ok := flag(args, "--extra")
		if ok != (n.Index == 0) || (ok && (extra != "x" || slices.Index(args, "--extra") < slices.Index(args, "--common"))) {
			t.Errorf("%s: args %q: the Extra of n1 alone, after the common flags", n.ID, args)
		}
		if b, _ := os.ReadFile(n.LogPath); !strings.HasPrefix(string(b), "--- starting "+n.ID+"\n") {
			t.Errorf("%s: log %q, want the header first", n.ID, b)
		}
		if n.LogPath != n.Dir+".log" {
			t.Errorf("%s: log at %s, want beside its data dir", n.ID, n.LogPath)
		}
	}
}

// TestStandalone: a standalone node gets its addresses and data dir but
// neither --id nor --peers (sluice's single-node mode), then the common
// flags and its Extra.
func TestStandalone(t *testing.T) {
	c := newFake(t, Config{Nodes: 1, Standalone: true, Flags: []string{"--in-memory"},
		Setup: func(ns []*Node) { ns[0].Extra = []string{"--extra", "x"} }})
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	want := []string{"--addr", n.RESP, "--raft-addr", n.Raft, "--forward-addr", n.Fwd, "--data-dir", n.Dir, "--in-memory", "--extra", "x"}
	if args := startArgs(t, n); !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
}

// TestLifecycle: kill, restart, pause, stop; an exit that nobody asked
// for is a crash; Replace moves a stopped node to its spare addresses, a
// new ID and an empty data dir, and starts it as a joiner.
func TestLifecycle(t *testing.T) {
	c := newFake(t, Config{Nodes: 3, Spares: true, LogDir: t.TempDir()})
	n := c.Nodes[1]
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	if !n.Running() || n.Process() == nil {
		t.Fatal("a started node is not running")
	}
	if err := c.Start(n); err == nil {
		t.Fatal("a second start of a running node succeeded")
	}
	if _, err := c.Replace(n); err == nil {
		t.Fatal("Replace of a running node succeeded")
	}
	c.Kill(n)
	if n.Running() || n.Process() != nil {
		t.Fatal("a killed node still runs")
	}
	if err := c.Start(n); err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(n, syscall.SIGSTOP); err != nil || n.Running() {
		t.Fatalf("SIGSTOP: %v, running %v", err, n.Running())
	}
	if err := c.Signal(n, syscall.SIGCONT); err != nil || !n.Running() {
		t.Fatalf("SIGCONT: %v, running %v", err, n.Running())
	}
	if err := c.Stop(n, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(n.Crashes()) != 0 {
		t.Fatalf("a kill and a stop counted as crashes: %v", n.Crashes())
	}

	// A crash: the process dies of a signal nobody sent through the harness.
	other := c.Nodes[2]
	if err := other.Process().Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if len(other.Crashes()) != 1 || other.Running() {
			return fmt.Errorf("crashes %v, running %v", other.Crashes(), other.Running())
		}
		return nil
	})
	if err := c.HealAll(); err != nil || !n.Running() || !other.Running() {
		t.Fatalf("HealAll: %v; running %v %v", err, n.Running(), other.Running())
	}

	c.Kill(n)
	raft, logPath := n.Raft, n.LogPath
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := c.Replace(n)
	if err != nil || old != "n2" || n.ID != "n2r1" || n.Raft == raft || n.LogPath != logPath {
		t.Fatalf("Replace: %q %v; now %s at %s logging to %s", old, err, n.ID, n.Raft, n.LogPath)
	}
	if _, err := os.Stat(n.Dir); !os.IsNotExist(err) {
		t.Fatalf("the replaced node's data dir is still there: %v", err)
	}
	if err := os.Truncate(n.LogPath, 0); err != nil { // startArgs reads this start's
		t.Fatal(err)
	}
	if err := c.Start(n); err != nil {
		t.Fatal(err)
	}
	args := startArgs(t, n)
	if _, ok := flag(args, "--peers"); ok || !slices.Contains(args, "--no-bootstrap") {
		t.Fatalf("a replacement's args %q, want --no-bootstrap and no --peers", args)
	}
	if id, _ := flag(args, "--id"); id != "n2r1" {
		t.Fatalf("a replacement's --id %q", id)
	}
}

// TestJoiner: a joiner is no member of Nodes or Peers, starts with
// --no-bootstrap and without --peers, and Close kills it.
func TestJoiner(t *testing.T) {
	c := newFake(t, Config{Nodes: 1})
	j, err := c.Joiner("n9", filepath.Join(t.TempDir(), "n9"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.Peers, "n9") || len(c.Nodes) != 1 {
		t.Fatalf("the joiner is in the cluster: %s, %d nodes", c.Peers, len(c.Nodes))
	}
	if err := c.Start(j); err != nil {
		t.Fatal(err)
	}
	args := startArgs(t, j)
	if _, ok := flag(args, "--peers"); ok || !slices.Contains(args, "--no-bootstrap") {
		t.Fatalf("a joiner's args %q", args)
	}
	p := j.Process()
	c.Close()
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("Close left the joiner running")
	}
}
