// Package proccluster runs a cluster of sluice processes on 127.0.0.1: N
// nodes, each a member of every one of G Raft groups, that a test or a
// test tool starts, kills, restarts, pauses, partitions and replaces. It is
// the one harness of cmd/sluice's process tests, of the chaos suite
// (cmd/sluice-chaos) and of the benchmark's sluice targets (bench, one
// Standalone node for the single-node ones); the in-process back end of
// cluster's own tests stays in cluster (it builds on that package's
// unexported types).
//
// The shape follows hashicorp/raft's testing.go: New lays out N nodes,
// StartAll starts them, Leader(g) waits for the leader of a group, Kill,
// Start (a restart on the same data dir), Stop, Signal, Replace (wipe a
// node and join it as a new member), and, with Config.Proxies, Cut, Stall
// and Heal partition the links (internal/testkit's LinkProxy, whose doc
// describes the partitions).
//
// It does not import package testing (the chaos suite is a program): every
// call returns an error, and cmd/sluice's tests turn them into t.Fatal.
package proccluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/freeport"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// Config describes a cluster.
type Config struct {
	// Bin is the sluice binary every node runs (unless its Node.Bin says
	// otherwise).
	Bin string
	// Nodes is the number of nodes, n1 to nN.
	Nodes int
	// Shards is the number of Raft groups: --shards when above 1.
	Shards int
	// DataDir holds the nodes' data directories, DataDir/n1 to DataDir/nN.
	DataDir string
	// LogDir holds the nodes' output, LogDir/<id>.log (appended to across
	// restarts); when empty, a node's output goes beside its data
	// directory, <Dir>.log.
	LogDir string
	// Flags are given to every node after the harness's own (--id,
	// --addr, ..., --peers, --debug-dial-map, --shards) and before the
	// node's Extra.
	Flags []string
	// Proxies makes every node dial each peer's Raft and forward ports
	// through link proxies of its own (one per ordered pair of nodes and
	// per port), so that Cut, Stall and Heal can partition the cluster.
	Proxies bool
	// Standalone starts the nodes without --id and --peers: each is a
	// sluice of its own, in sluice's single-node mode (the engine alone
	// with --in-memory, else one durable Raft voter). The benchmark's
	// single-node targets are one-node standalone clusters.
	Standalone bool
	// Spares gives every node a second pair of Raft and forward addresses
	// (with their proxies) for Replace.
	Spares bool
	// DieWithParent kills the nodes when this process ends, however it
	// ends (Linux only).
	DieWithParent bool
	// Header, when set, returns a line written to a node's log before
	// each of its starts.
	Header func(n *Node) string
	// Setup, when set, is called on the laid-out nodes before the
	// cluster's --peers and proxies are derived from them: it may change
	// their addresses, Dir, Extra, Bin.
	Setup func(nodes []*Node)
	// Log takes the harness's messages (an unexpected exit, the proxies'
	// debug messages); nil discards them.
	Log *slog.Logger
}

// Node is one sluice process of the cluster. Its addresses and data
// directory stay the same across restarts (Replace moves it to its spare
// addresses).
type Node struct {
	*sluiceproc.Node
	// Index is the node's place in Cluster.Nodes.
	Index int
	// LogPath is the file its output is appended to.
	LogPath string
	// Bin, when set, is the binary this node runs instead of Config.Bin.
	Bin string
	// Joined starts the node without --peers and with --no-bootstrap: it
	// waits to be joined (RAFT.JOIN) instead of forming the cluster.
	Joined bool

	// spare is the other Raft and forward address pair of this slot (with
	// Config.Spares): a replacement moves to it, since the member it
	// replaces keeps its addresses in the configuration until removed.
	spare [2]string
	// baseID names the slot (n1...); replaced counts its replacements
	// (the node's ID is baseID, then baseID+"r1", ...).
	baseID   string
	replaced int
	dialMap  string
	external bool // attached (Attach): always up, never started here

	mu         sync.Mutex
	proc       *sluiceproc.Process
	exited     chan struct{} // closed when the current process has exited, after its bookkeeping
	expectExit bool
	paused     bool
	crashes    []string
}

// Running reports whether the node's process is up and not paused.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.external || (n.proc != nil && !n.paused)
}

// Process returns the node's current process, nil while it is down.
func (n *Node) Process() *sluiceproc.Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Crashes returns the node's unexpected exits so far, one line each.
func (n *Node) Crashes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.crashes...)
}

// Cluster is a cluster of sluice processes.
type Cluster struct {
	// Nodes are the nodes, n1 first.
	Nodes []*Node
	// Peers is the --peers value of the nodes as laid out.
	Peers string

	cfg     Config
	log     *slog.Logger
	proxies map[[2]int][]*testkit.LinkProxy // (from, to): Raft, forward, then the spare Raft and forward
	joiners []*Node                         // laid out by Joiner
}

// New lays out the cluster: addresses on free ports of 127.0.0.1 (below
// the ephemeral range, internal/freeport, held until the proxies have
// theirs), data directories, and the link proxies. It starts nothing:
// StartAll does.
func New(cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, log: cfg.Log, proxies: map[[2]int][]*testkit.LinkProxy{}}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var reserved []net.Listener
	defer func() {
		for _, ln := range reserved {
			ln.Close()
		}
	}()
	reserve := func() (string, error) {
		ln, err := freeport.Listen()
		if err != nil {
			return "", fmt.Errorf("find a free port: %w", err)
		}
		reserved = append(reserved, ln)
		return ln.Addr().String(), nil
	}
	layout, err := sluiceproc.Layout(cfg.Nodes, cfg.DataDir, reserve)
	if err != nil {
		return nil, err
	}
	for i, l := range layout {
		n := &Node{Node: l, Index: i, baseID: l.ID}
		if cfg.Spares {
			for j := range n.spare {
				if n.spare[j], err = reserve(); err != nil {
					return nil, err
				}
			}
		}
		c.Nodes = append(c.Nodes, n)
	}
	if cfg.Setup != nil {
		cfg.Setup(c.Nodes)
	}
	for _, n := range c.Nodes {
		n.LogPath = n.Dir + ".log"
		if cfg.LogDir != "" {
			n.LogPath = filepath.Join(cfg.LogDir, n.ID+".log")
		}
	}
	c.Peers = sluiceproc.Peers(layout)
	if cfg.Proxies {
		if err := c.makeProxies(); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Attach returns a cluster of nodes that run already, started elsewhere
// (fakes in a test): they count as up, and Start, Kill, Stop and Signal
// refuse them. Leader, WaitServing and RaftStatus work.
func Attach(nodes []*sluiceproc.Node) *Cluster {
	c := &Cluster{log: slog.New(slog.DiscardHandler), Peers: sluiceproc.Peers(nodes)}
	for i, nd := range nodes {
		c.Nodes = append(c.Nodes, &Node{Node: nd, Index: i, baseID: nd.ID, external: true})
	}
	return c
}

// Joiner lays out a node that is not one of Nodes and is not in Peers: id,
// addresses on free ports, data directory dir, Joined (it waits to be
// joined by RAFT.JOIN). Start, Kill, Stop and Signal work on it, and Close
// kills it; it has no proxies.
func (c *Cluster) Joiner(id, dir string) (*Node, error) {
	n := &Node{Node: &sluiceproc.Node{ID: id, Dir: dir}, Index: -1, baseID: id, Joined: true, LogPath: dir + ".log"}
	for _, a := range []*string{&n.RESP, &n.Raft, &n.Fwd} {
		var err error
		if *a, err = sluiceproc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	c.joiners = append(c.joiners, n)
	return n, nil
}

// StartAll starts every node.
func (c *Cluster) StartAll() error {
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			return err
		}
	}
	return nil
}

// args are n's flags.
func (c *Cluster) args(n *Node) []string {
	var own []string
	if n.dialMap != "" {
		own = append(own, "--debug-dial-map", n.dialMap)
	}
	if c.cfg.Shards > 1 {
		own = append(own, "--shards", strconv.Itoa(c.cfg.Shards))
	}
	common := append(own, c.cfg.Flags...)
	if c.cfg.Standalone {
		args := []string{"--addr", n.RESP, "--raft-addr", n.Raft, "--forward-addr", n.Fwd, "--data-dir", n.Dir}
		return append(append(args, common...), n.Extra...)
	}
	if !n.Joined {
		return n.Args(c.Peers, common...)
	}
	args := []string{"--id", n.ID, "--addr", n.RESP, "--raft-addr", n.Raft}
	if n.Fwd != "" {
		args = append(args, "--forward-addr", n.Fwd)
	}
	args = append(args, "--data-dir", n.Dir, "--no-bootstrap")
	args = append(args, common...)
	return append(args, n.Extra...)
}

// Start starts n's process: the first start, or a restart on the same data
// dir after Kill or Stop.
func (c *Cluster) Start(n *Node) error {
	if n.external {
		return fmt.Errorf("%s is not started here", n.ID)
	}
	for _, p := range c.proxiesTo(n) {
		if err := p.TargetUp(); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return fmt.Errorf("%s is already running", n.ID)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	if c.cfg.Header != nil {
		if h := c.cfg.Header(n); h != "" {
			fmt.Fprintln(logf, h)
		}
	}
	bin := n.Bin
	if bin == "" {
		bin = c.cfg.Bin
	}
	p, err := sluiceproc.Start(n.ID, bin, c.args(n), sluiceproc.Options{Output: logf, DieWithParent: c.cfg.DieWithParent})
	if err != nil {
		logf.Close()
		return err
	}
	n.proc, n.exited, n.expectExit, n.paused = p, make(chan struct{}), false, false
	exited := n.exited
	go func() {
		<-p.Exited()
		logf.Close()
		n.mu.Lock()
		defer n.mu.Unlock()
		if !n.expectExit {
			msg := fmt.Sprintf("%s exited unexpectedly at %s: %v", n.ID, time.Now().Format(time.RFC3339Nano), p.Err())
			n.crashes = append(n.crashes, msg)
			c.log.Error("node exited unexpectedly", "node", n.ID, "err", p.Err())
		}
		n.proc = nil
		close(exited)
	}()
	return nil
}

// down marks n's current process as going, and returns it and the channel
// closed once its exit is booked; nil if n is down.
func (n *Node) down() (*sluiceproc.Process, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil, nil
	}
	n.expectExit = true
	return n.proc, n.exited
}

// Kill sends SIGKILL (a crash) to n and waits for its process to go; a
// node that is down stays so.
func (c *Cluster) Kill(n *Node) {
	p, exited := n.down()
	if p == nil {
		return
	}
	_ = p.Signal(syscall.SIGKILL)
	<-exited
	for _, lp := range c.proxiesTo(n) {
		lp.TargetDown()
	}
}

// Stop sends SIGTERM to n and waits up to timeout for its process to go;
// after timeout it kills it and says so. How the process exited is its
// Err (take the Process before the Stop).
func (c *Cluster) Stop(n *Node, timeout time.Duration) error {
	p, exited := n.down()
	if p == nil {
		return nil
	}
	err := p.Stop(timeout)
	<-exited
	for _, lp := range c.proxiesTo(n) {
		lp.TargetDown()
	}
	return err
}

// Signal sends sig to n's process; SIGSTOP marks it paused (not Running)
// until SIGCONT, and after SIGTERM, SIGINT or SIGKILL its exit is expected
// (not one of its Crashes).
func (c *Cluster) Signal(n *Node, sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return fmt.Errorf("%s is not running", n.ID)
	}
	if err := n.proc.Signal(sig); err != nil {
		return err
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL:
		n.expectExit = true
	}
	return nil
}

// Replace makes the stopped node n a new member in its slot: a new ID
// (n1r1, n1r2...), the slot's other Raft and forward addresses (its
// predecessor holds the current ones in the configuration until removed,
// Config.Spares), an empty data dir, and Joined. It returns the
// predecessor's ID. The RESP address stays, so that the clients of the
// slot carry on.
func (c *Cluster) Replace(n *Node) (string, error) {
	if !c.cfg.Spares {
		return "", errors.New("replace: the cluster has no spare addresses (Config.Spares)")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return "", fmt.Errorf("%s is running", n.ID)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		return "", fmt.Errorf("wipe %s: %w", n.Dir, err)
	}
	old := n.ID
	n.replaced++
	n.ID = n.baseID + "r" + strconv.Itoa(n.replaced)
	n.Joined = true
	n.Raft, n.spare[0] = n.spare[0], n.Raft
	n.Fwd, n.spare[1] = n.spare[1], n.Fwd
	return old, nil
}

// Close resumes paused nodes, kills every node (and joiner) and closes the
// proxies.
func (c *Cluster) Close() {
	for _, n := range append(c.Nodes, c.joiners...) {
		if n.external {
			continue
		}
		n.mu.Lock()
		paused := n.paused
		n.mu.Unlock()
		if paused {
			_ = c.Signal(n, syscall.SIGCONT)
		}
		c.Kill(n)
	}
	for _, ps := range c.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
}

// HealAll undoes whatever may still be broken: links up, paused nodes
// resumed, stopped nodes started.
func (c *Cluster) HealAll() error {
	if err := c.Heal(); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		n.mu.Lock()
		paused, down := n.paused, n.proc == nil && !n.external
		n.mu.Unlock()
		if paused {
			if err := c.Signal(n, syscall.SIGCONT); err != nil {
				return err
			}
		}
		if down {
			if err := c.Start(n); err != nil {
				return err
			}
		}
	}
	return nil
}
