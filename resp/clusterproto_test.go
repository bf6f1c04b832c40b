package resp

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/servetest"
	"github.com/sluice-rl/sluice/internal/slots"
)

// fakeCluster is an in-memory executor that claims to be a Raft node with
// the topology a test sets.
type fakeCluster struct {
	*LocalExecutor
	mu    sync.Mutex
	top   slots.Topology
	addr  string // Route's answer: the leader's RESP address
	local bool   // Route's answer: this node leads
	// starting is Starting's answer: the node has not served yet.
	starting error
}

func (f *fakeCluster) Starting() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starting
}

func (f *fakeCluster) Groups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(len(f.top.Groups), 1)
}
func (f *fakeCluster) Status(g int) [][2]string                             { return [][2]string{{"id", f.top.Self}} }
func (f *fakeCluster) Join(ctx context.Context, id, addr string) error      { return nil }
func (f *fakeCluster) Remove(ctx context.Context, id string) error          { return nil }
func (f *fakeCluster) Transfer(ctx context.Context, g int, id string) error { return nil }
func (f *fakeCluster) Snapshot(ctx context.Context) error                   { return nil }

func (f *fakeCluster) Topology() slots.Topology {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.top
}

func (f *fakeCluster) Route(group int) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addr, f.local
}

func (f *fakeCluster) set(top slots.Topology, addr string, local bool) {
	f.mu.Lock()
	f.top, f.addr, f.local = top, addr, local
	f.mu.Unlock()
}

// threeNodes is a healthy cluster of three seen from n2, a follower of n1.
var threeNodes = slots.Topology{
	Self:   "n2",
	Epoch:  7,
	Nodes:  []slots.Node{{ID: "n1", RESPAddr: "127.0.0.1:7001"}, {ID: "n2", RESPAddr: "127.0.0.1:7002"}, {ID: "n3", RESPAddr: "127.0.0.1:7003"}},
	Groups: []slots.Group{{Range: slots.Range{First: 0, Last: 16383}, Leader: "n1"}},
}

// startCluster runs a server with cfg over a fakeCluster.
func startCluster(t testing.TB, cfg Config, top slots.Topology, leaderAddr string, local bool) (*Server, *fakeCluster, string) {
	t.Helper()
	eng := engine.New(engine.Config{Stripes: 16})
	cfg.Engine = eng
	fake := &fakeCluster{LocalExecutor: NewLocalExecutor(eng, nil)}
	fake.set(top, leaderAddr, local)
	srv := NewServer(cfg, fake)
	return srv, fake, servetest.Start(t, srv)
}

func nodeID(raftID string) string {
	s := sha1.Sum([]byte(raftID))
	return hex.EncodeToString(s[:])
}

func TestClusterNodeID(t *testing.T) {
	id := clusterNodeID("node1")
	if len(id) != 40 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("node id %q is not 40 lower-case hex digits", id)
	}
	if id != clusterNodeID("node1") || id == clusterNodeID("node2") {
		t.Fatal("node ids must be stable and distinct")
	}
}

func TestClusterInfoShape(t *testing.T) {
	_, fake, addr := startCluster(t, Config{Cluster: true}, threeNodes, "127.0.0.1:7001", false)
	c := rawDial(t, addr)
	info := string(c.do(t, "CLUSTER", "INFO"))
	for _, line := range []string{"cluster_state:ok\r\n", "cluster_slots_assigned:16384\r\n", "cluster_slots_ok:16384\r\n",
		"cluster_known_nodes:3\r\n", "cluster_size:1\r\n", "cluster_current_epoch:7\r\n"} {
		if !strings.Contains(info, line) {
			t.Errorf("CLUSTER INFO lacks %q:\n%s", line, info)
		}
	}
	// Without a leader the cluster is down and no slot is served.
	noLeader := threeNodes
	noLeader.Groups = []slots.Group{{Range: slots.Range{First: 0, Last: 16383}}}
	fake.set(noLeader, "", false)
	info = string(c.do(t, "CLUSTER", "INFO"))
	for _, line := range []string{"cluster_state:fail\r\n", "cluster_slots_ok:0\r\n", "cluster_slots_fail:16384\r\n", "cluster_size:0\r\n"} {
		if !strings.Contains(info, line) {
			t.Errorf("CLUSTER INFO without a leader lacks %q:\n%s", line, info)
		}
	}
	c.do(t, "CLUSTER", "SLOTS").expect(t, "*0 []")
	// A member that has not announced its address yet is listed without one.
	unannounced := threeNodes
	unannounced.Nodes = append([]slots.Node(nil), threeNodes.Nodes...)
	unannounced.Nodes[2].RESPAddr = ""
	fake.set(unannounced, "127.0.0.1:7001", false)
	nodes := string(c.do(t, "CLUSTER", "NODES"))
	if !strings.Contains(nodes, nodeID("n3")+" :0@0 slave,noaddr ") {
		t.Errorf("CLUSTER NODES with n3 unannounced:\n%s", nodes)
	}
	if got := string(c.do(t, "CLUSTER", "SLOTS")); strings.Contains(got, nodeID("n3")) {
		t.Errorf("CLUSTER SLOTS lists n3 without an address: %s", got)
	}
}

// TestStartingNodeSaysLoading: until the executor served once (Starter),
// PING answers LOADING, INFO says loading:1 and CLUSTER INFO
// cluster_state:fail, so a client that waits for any of them sends its
// commands once they work; then PONG.
func TestStartingNodeSaysLoading(t *testing.T) {
	_, fake, addr := startCluster(t, Config{Cluster: true}, threeNodes, "127.0.0.1:7001", false)
	fake.mu.Lock()
	fake.starting = &errcode.Error{Code: errcode.Loading}
	fake.mu.Unlock()
	c := rawDial(t, addr)
	c.do(t, "PING").expect(t, "-LOADING sluice is loading the dataset in memory")
	c.do(t, "PING", "x").expect(t, "-LOADING sluice is loading the dataset in memory")
	if info := string(c.do(t, "INFO", "persistence")); !strings.Contains(info, "loading:1\r\n") {
		t.Errorf("INFO while starting:\n%s", info)
	}
	if info := string(c.do(t, "CLUSTER", "INFO")); !strings.Contains(info, "cluster_state:fail\r\n") {
		t.Errorf("CLUSTER INFO while starting:\n%s", info)
	}
	fake.mu.Lock()
	fake.starting = nil
	fake.mu.Unlock()
	c.do(t, "PING").expect(t, "+PONG")
	if info := string(c.do(t, "INFO", "persistence")); !strings.Contains(info, "loading:0\r\n") {
		t.Errorf("INFO once served:\n%s", info)
	}
	if info := string(c.do(t, "CLUSTER", "INFO")); !strings.Contains(info, "cluster_state:ok\r\n") {
		t.Errorf("CLUSTER INFO once served:\n%s", info)
	}
}

// INFO's Cluster section says whether the node speaks the cluster protocol.
func TestInfoClusterSection(t *testing.T) {
	_, _, clusterAddr := startCluster(t, Config{Cluster: true}, threeNodes, "127.0.0.1:7001", false)
	// A Raft node that is not a cluster member (a single node) says 0.
	_, _, singleAddr := startCluster(t, Config{}, threeNodes, "", true)
	for _, tc := range []struct {
		addr, want string
		mode       string
	}{
		{clusterAddr, "# Cluster\r\ncluster_enabled:1\r\n", "redis_mode:cluster\r\n"},
		{singleAddr, "# Cluster\r\ncluster_enabled:0\r\n", "redis_mode:standalone\r\n"},
		{startServer(t, Config{}), "# Cluster\r\ncluster_enabled:0\r\n", "redis_mode:standalone\r\n"},
	} {
		c := rawDial(t, tc.addr)
		for _, args := range [][]string{{"INFO"}, {"INFO", "cluster"}} {
			if got := string(c.do(t, args...)); !strings.Contains(got, tc.want) {
				t.Errorf("%v: no %q in\n%s", args, tc.want, got)
			}
		}
		if got := string(c.do(t, "INFO", "server")); !strings.Contains(got, tc.mode) {
			t.Errorf("INFO server: no %q in\n%s", tc.mode, got)
		}
	}
}

// COMMAND reports key positions for every command that takes keys, which
// cluster clients route by (testdata/transcripts/cluster_commands.txt
// shows those of RL.ALL, RL.TOKEN and DEL).
func TestCommandKeyPositionsForClusterClients(t *testing.T) {
	srv, _, _ := startCluster(t, Config{Cluster: true}, threeNodes, "", true)
	var takesKey func(args []argDoc) bool
	takesKey = func(args []argDoc) bool {
		for _, a := range args {
			if a.typ == "key" || takesKey(a.subargs) {
				return true
			}
		}
		return false
	}
	checked := 0
	for name, cmd := range srv.commands {
		for _, sub := range append([]*command{cmd}, cmd.subs...) {
			if takesKey(sub.args) {
				checked++
				if sub.firstKey <= 0 || sub.keyStep <= 0 {
					t.Errorf("%s (%s) takes a key argument but COMMAND reports no key position", name, sub.name)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d commands take keys: the argument docs are not what this test expects", checked)
	}
}
