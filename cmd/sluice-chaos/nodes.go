package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/freeport"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// node is one sluice process of the cluster. Its addresses, data
// directory and skew stay the same across restarts.
type node struct {
	*sluiceproc.Node
	idx     int
	logPath string
	skew    time.Duration
	dialMap string
	// alt is the other Raft and forward address pair of this slot: a
	// replacement (the "replace" fault) moves to it, since the member it
	// replaces keeps its addresses in the configuration until removed.
	// Both pairs have their proxies from the start.
	alt [2]string
	// baseID names the slot (n1...); replaced counts its replacements
	// (the node's ID is baseID, then baseID+"r1", ...), and a
	// replacement, started empty, is joined: it never has --peers.
	baseID          string
	replaced        int
	mu              sync.Mutex
	proc            *sluiceproc.Process
	exited          chan struct{} // closed when the current process has exited, after its bookkeeping
	expectExit      bool
	paused          bool
	unexpectedExits []string
}

// clusterTimeout is every node's --cluster-timeout: without a majority, a
// command fails with CLUSTERDOWN after this long.
const clusterTimeout = 2 * time.Second

// cluster is three sluice processes on 127.0.0.1, each dialing its peers
// through the link proxies, each a member of every one of shards Raft
// groups.
type cluster struct {
	bin     string
	shards  int
	nodes   []*node
	peers   string
	proxies map[[2]int][]*linkProxy // (from, to): the Raft, forward, alternate Raft and forward proxies
	log     *slog.Logger
	extra   []string // more flags for every node (-sluice-flags)
}

// reserveAddr holds a free port of 127.0.0.1 until the returned listener
// closes, so that nothing else (the proxies) takes it meanwhile.
func reserveAddr() (net.Listener, error) {
	ln, err := freeport.Listen()
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	return ln, nil
}

// newCluster allocates the addresses and proxies of n nodes of shards Raft
// groups each (node skewed gets the clock skew) and starts them.
func newCluster(bin, out string, n, shards, skewed int, skew time.Duration, extra []string, log *slog.Logger) (*cluster, error) {
	c := &cluster{bin: bin, shards: shards, proxies: map[[2]int][]*linkProxy{}, log: log, extra: extra}
	// The nodes' ports stay reserved until the proxies have theirs.
	var reserved []net.Listener
	defer func() {
		for _, ln := range reserved {
			ln.Close()
		}
	}()
	layout, err := sluiceproc.Layout(n, filepath.Join(out, "data"), func() (string, error) {
		ln, err := reserveAddr()
		if err != nil {
			return "", err
		}
		reserved = append(reserved, ln)
		return ln.Addr().String(), nil
	})
	if err != nil {
		return nil, err
	}
	for i, l := range layout {
		nd := &node{Node: l, idx: i, logPath: filepath.Join(out, l.ID+".log"), baseID: l.ID}
		for j := range nd.alt {
			ln, err := reserveAddr()
			if err != nil {
				return nil, err
			}
			reserved = append(reserved, ln)
			nd.alt[j] = ln.Addr().String()
		}
		if i == skewed {
			nd.skew = skew
		}
		c.nodes = append(c.nodes, nd)
	}
	c.peers = sluiceproc.Peers(layout)
	for _, from := range c.nodes {
		var m []string
		for _, to := range c.nodes {
			if from == to {
				continue
			}
			var pair []*linkProxy
			// Raft, forward, then the alternate Raft and forward.
			for _, target := range []string{to.Raft, to.Fwd, to.alt[0], to.alt[1]} {
				p, err := newLinkProxy(target, log)
				if err != nil {
					c.stop()
					return nil, err
				}
				pair = append(pair, p)
				m = append(m, target+"="+p.Addr())
			}
			c.proxies[[2]int{from.idx, to.idx}] = pair
		}
		from.dialMap = strings.Join(m, ",")
	}
	for _, ln := range reserved {
		ln.Close()
	}
	reserved = nil
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// proxiesTo returns the proxies in front of nd.
func (c *cluster) proxiesTo(nd *node) []*linkProxy {
	var ps []*linkProxy
	for key, pair := range c.proxies {
		if key[1] == nd.idx {
			ps = append(ps, pair...)
		}
	}
	return ps
}

// start starts nd's process (again).
func (c *cluster) start(nd *node) error {
	for _, p := range c.proxiesTo(nd) {
		if err := p.TargetUp(); err != nil {
			return err
		}
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.proc != nil {
		return fmt.Errorf("%s is already running", nd.ID)
	}
	logf, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", nd.ID, err)
	}
	common := []string{"--enable-debug-command",
		"--cluster-timeout", clusterTimeout.String(), "--log-level", "info",
		"--debug-dial-map", nd.dialMap}
	if nd.skew != 0 {
		common = append(common, "--debug-clock-skew", nd.skew.String())
	}
	if c.shards > 1 {
		common = append(common, "--shards", strconv.Itoa(c.shards))
	}
	common = append(common, c.extra...)
	fmt.Fprintf(logf, "--- chaos: starting %s at %s\n", nd.ID, time.Now().Format(time.RFC3339Nano))
	args := nd.Args(c.peers, common...)
	if nd.replaced > 0 {
		// A replacement was started empty and joined: it bootstraps
		// nothing and has no --peers, at every start.
		args = append([]string{"--id", nd.ID, "--addr", nd.RESP, "--raft-addr", nd.Raft, "--forward-addr", nd.Fwd,
			"--data-dir", nd.Dir, "--no-bootstrap"}, append(common, nd.Extra...)...)
	}
	// The nodes die with the chaos tool, however it ends.
	p, err := sluiceproc.Start(nd.ID, c.bin, args, sluiceproc.Options{Output: logf, DieWithParent: true})
	if err != nil {
		logf.Close()
		return err
	}
	nd.proc, nd.exited, nd.expectExit, nd.paused = p, make(chan struct{}), false, false
	exited := nd.exited
	go func() {
		<-p.Exited()
		logf.Close()
		nd.mu.Lock()
		defer nd.mu.Unlock()
		if !nd.expectExit {
			msg := fmt.Sprintf("%s exited unexpectedly at %s: %v", nd.ID, time.Now().Format(time.RFC3339Nano), p.Err())
			nd.unexpectedExits = append(nd.unexpectedExits, msg)
			c.log.Error("node exited unexpectedly", "node", nd.ID, "err", p.Err())
		}
		nd.proc = nil
		close(exited)
	}()
	return nil
}

// kill sends SIGKILL (kill -9) and waits for the process to go.
func (c *cluster) kill(nd *node) {
	nd.mu.Lock()
	p, exited := nd.proc, nd.exited
	if p == nil {
		nd.mu.Unlock()
		return
	}
	nd.expectExit = true
	nd.mu.Unlock()
	_ = p.Signal(syscall.SIGKILL)
	<-exited
	for _, p := range c.proxiesTo(nd) {
		p.TargetDown()
	}
}

// signal sends SIGSTOP or SIGCONT.
func (c *cluster) signal(nd *node, sig syscall.Signal) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.proc == nil {
		return fmt.Errorf("%s is not running", nd.ID)
	}
	if err := nd.proc.Signal(sig); err != nil {
		return err
	}
	nd.paused = sig == syscall.SIGSTOP
	return nil
}

// running reports whether nd's process is up and not paused.
func (nd *node) running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.proc != nil && !nd.paused
}

// crashes returns the unexpected exits seen so far.
func (nd *node) crashes() []string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return append([]string(nil), nd.unexpectedExits...)
}

// cut sets the link between nodes a and b, both ways, to mode.
func (c *cluster) cut(a, b int, mode cutMode) error {
	var errs []error
	for _, key := range [][2]int{{a, b}, {b, a}} {
		for _, p := range c.proxies[key] {
			errs = append(errs, p.Set(mode))
		}
	}
	return errors.Join(errs...)
}

// healLinks brings every link up.
// stall silences the link between nodes a and b, both ways, for a long
// while: Raft's proxies drop (their connections resume on heal: a real
// Raft connection stuck in backoff is dropped by TCP_USER_TIMEOUT within a
// second and redialed, which a proxy cannot show the kernel), forwarding's
// stall (their connections stay stuck after the heal, as TCP leaves them
// after a long cut: only new ones pass).
func (c *cluster) stall(a, b int) error {
	var errs []error
	for _, key := range [][2]int{{a, b}, {b, a}} {
		ps := c.proxies[key]
		errs = append(errs, ps[0].Set(cutDrop), ps[1].Set(cutStall), ps[2].Set(cutDrop), ps[3].Set(cutStall))
	}
	return errors.Join(errs...)
}

func (c *cluster) healLinks() error {
	var errs []error
	for _, ps := range c.proxies {
		for _, p := range ps {
			errs = append(errs, p.Set(linkUp))
		}
	}
	return errors.Join(errs...)
}

// leader returns a running node that says it leads Raft group g
// (RAFT.STATUS g), polling until timeout.
func (c *cluster) leader(ctx context.Context, g int, timeout time.Duration) (*node, error) {
	var leader *node
	err := testkit.PollContext(ctx, timeout, 50*time.Millisecond, func() error {
		for _, nd := range c.nodes {
			if !nd.running() {
				continue
			}
			st, err := raftStatus(nd.RESP, g, 500*time.Millisecond)
			if err == nil && st["role"] == "leader" {
				leader = nd
				return nil
			}
		}
		return fmt.Errorf("no leader of group %d", g)
	})
	return leader, err
}

// waitServing polls until every running node answers a read through the
// log (so a ready leader has a quorum), or timeout. The read is DBSIZE,
// which runs in every Raft group: a node answers it only once every group
// has a ready leader with a quorum.
func (c *cluster) waitServing(ctx context.Context, timeout time.Duration) error {
	next := 0 // c.nodes[:next] serve or are down
	return testkit.PollContext(ctx, timeout, 50*time.Millisecond, func() error {
		for ; next < len(c.nodes); next++ {
			nd := c.nodes[next]
			if !nd.running() {
				continue
			}
			if err := sluiceproc.Serving(nd.RESP, time.Second); err != nil {
				return fmt.Errorf("%s not serving: %w", nd.ID, err)
			}
		}
		return nil
	})
}

// stop kills every node and closes the proxies.
func (c *cluster) stop() {
	for _, nd := range c.nodes {
		nd.mu.Lock()
		paused := nd.paused
		nd.mu.Unlock()
		if paused {
			_ = c.signal(nd, syscall.SIGCONT)
		}
		c.kill(nd)
	}
	for _, ps := range c.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replaceNode makes the stopped node nd a new member in its slot: a new
// ID, the slot's other Raft and forward addresses (its predecessor holds
// the current ones in the configuration until removed), an empty data
// dir. It returns the predecessor's ID. The RESP address stays, so that
// the clients of the slot carry on.
func (c *cluster) replaceNode(nd *node) (string, error) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.proc != nil {
		return "", fmt.Errorf("%s is running", nd.ID)
	}
	if err := os.RemoveAll(nd.Dir); err != nil {
		return "", fmt.Errorf("wipe %s: %w", nd.Dir, err)
	}
	old := nd.ID
	nd.replaced++
	nd.ID = nd.baseID + "r" + strconv.Itoa(nd.replaced)
	nd.Raft, nd.alt[0] = nd.alt[0], nd.Raft
	nd.Fwd, nd.alt[1] = nd.alt[1], nd.Fwd
	return old, nil
}
