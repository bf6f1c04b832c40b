// Package cluster replicates sluice's engine with Raft: a Host (host.go) is
// the resp.Executor and resp.ClusterAdmin of a server process, and runs one
// Node per Raft group (one by default), each a voter of its group's cluster
// or a single durable voter on its own.
//
// Every operation, reads included, goes through the Raft log and is answered
// from the result the FSM computed when its entry applied: the same log
// gives every replica the same state, and every answer is linearizable by
// construction (a read is ordered after every write committed before it).
// node.go builds a group's Node (newNode, for NewHost) and closes it;
// execute.go is a command's way through it (routing, retries);
// leadership.go makes a new leader ready; batcher.go explains the group
// commit that makes this fast, commit.go what becomes of an entry handed
// to Raft; cluster/forward how followers hand commands to the leader
// (forwarding.go is a node as its forward port sees it); fsm.go the state
// machine, fsmsnapshot.go its snapshots. Besides its parts (config, Raft,
// FSM, batcher, forward client, stores), a Node keeps its state by
// concern, each in a small type of the file that uses it: replayState
// (execute.go), versionState (version.go), leaderState (leadership.go),
// memberState (membership.go), and the lifecycle below (closing, the
// background goroutines), which is a Host's too.
//
// Lock order. The package's mutexes are leaves: none is held while another
// is taken, while raft is called, or while the engine is called (a
// cluster/forward connection's die takes its Client's mu after releasing
// its own, in that package). The engine takes its own shard locks only inside the FSM's calls (apply, snapshot,
// restore) and the sweeper's, which hold no lock of this package; so Raft
// is never called with an engine lock held. The log store's locks
// (cluster/logstore: lazySyncVFS.mu, lazyFile.mu) are leaves too, taken
// inside raft-wal's calls and the flusher's, never with one of the others
// held.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/logstore"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/persistence"
)

// Node is one Raft voter of one group, running that group's engine. It
// implements resp.Executor; its admin methods serve the Host's, which
// implements resp.ClusterAdmin.
type Node struct {
	cfg     Config
	log     *slog.Logger
	eng     *engine.Engine
	fsm     *fsm
	raft    *raft.Raft
	batcher *batcher
	fwd     *forward.Client
	fwdAddr string       // the host's advertised forward address
	group   int          // the Raft group this node is a member of
	metrics *nodeMetrics // metrics.go
	timers  timerPool    // deadline timers of Execute and forwarded requests
	// peers looks up a member's addresses in the other groups of this
	// node's host, for a group whose log has not told it yet (a node
	// still replaying at start).
	peers func(id string) (codec.Leader, bool)

	stores    *logstore.Stores // nil in memory
	transport raft.Transport

	// The node's state, by concern, each kept by the file named.
	replay     replayState  // execute.go
	version    versionState // version.go
	lead       leaderState  // leadership.go
	membership memberState  // membership.go
	life       lifecycle    // below
}

// lifecycle is a node's (or a host's) life from its start to Close:
// closing closes when Close starts, and Close waits for the background
// goroutines (spawn) before it stops Raft.
type lifecycle struct {
	closing chan struct{}
	once    sync.Once
	err     error          // Close's
	bg      sync.WaitGroup // leadership monitor, sweeper, announcer, version loop, disk hand-off
}

// spawn runs f in a background goroutine that Close waits for.
func (l *lifecycle) spawn(f func()) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f()
	}()
}

// groupShare is what a group gets from its Host (host.go): the host's
// Raft listener, through the group's own stream layer; the address of the
// host's forward listener; the cluster identity; the other groups' view
// of the members' addresses.
type groupShare struct {
	group   int
	stream  *groupStream
	fwdAddr string // the host's advertised forward address
	cluster string // the cluster identity (cluster/peer/identity.go), "" for none
	// peers looks a member's addresses up in the host's other groups.
	peers func(id string) (codec.Leader, bool)
}

// newNode starts group sh.group of a host (NewHost, the one constructor)
// on eng, which must be empty (or hold nothing worth keeping: a snapshot
// restore replaces it). It opens the stores, starts Raft, bootstraps the
// group on first start, and returns at once; WaitReady waits for a
// leader. cfg is the host's (validated, with its defaults) with the
// group's data dir.
func newNode(ctx context.Context, cfg Config, eng *engine.Engine, sh *groupShare) (*Node, error) {
	if eng == nil {
		return nil, errors.New("cluster: nil engine")
	}
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.ID, "group", sh.group),
		eng:     eng,
		group:   sh.group,
		fwdAddr: sh.fwdAddr,
		peers:   sh.peers,
		metrics: newNodeMetrics(),
		life:    lifecycle{closing: make(chan struct{})},

		version: versionState{kick: make(chan string, 16)},
		lead:    leaderState{halted: make(chan struct{}, 1)},
	}
	ok := false
	defer func() {
		if !ok {
			if n.raft != nil {
				_ = n.raft.Shutdown().Error()
			}
			n.cleanup()
		}
	}()

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
		err    error
	)
	hlog := newHCLogAdapter(n.log, cfg.RaftLogLevel)
	if cfg.InMemory {
		store := raft.NewInmemStore()
		logs, stable, snaps = store, store, raft.NewInmemSnapshotStore()
	} else {
		dir, err := persistence.OpenDataDir(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		// Before the log opens: a log of a newer cluster version may hold
		// entries this build cannot apply.
		if err := dir.CheckClusterVersion(SupportedVersion); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if n.version.recorded, err = dir.ClusterVersion(); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.version.dataDir = &dir
		if n.stores, err = logstore.Open(logstore.Options{Store: cfg.LogStore, Fsync: cfg.Fsync, Logger: cfg.Logger}, dir, hlog); err != nil {
			return nil, err
		}
		// Raft reads back the entries it just appended (to replicate and
		// apply them): the cache answers those from memory, whichever
		// store is below.
		if logs, err = raft.NewLogCache(512, n.stores.Logs); err != nil {
			return nil, fmt.Errorf("cluster: log cache: %w", err)
		}
		stable = n.stores.Stable
		if snaps, err = raft.NewFileSnapshotStoreWithLogger(dir.SnapshotBase(), cfg.SnapshotRetain, hlog); err != nil {
			return nil, fmt.Errorf("cluster: snapshot store: %w", err)
		}
	}
	if n.replay.start, err = lastCommandIndex(logs); err != nil {
		return nil, err
	}
	// A group this node bootstraps now (no state yet) starts at this
	// release's cluster version: no member of an older release ever ran
	// it, so there is nothing to wait for (version.go,
	// recordBootstrapVersion). Before Raft starts: once it runs, a leader
	// may replicate the version entry here, which the FSM records too.
	if !cfg.NoBootstrap {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			return nil, fmt.Errorf("cluster: read log: %w", err)
		}
		if !has {
			if err := n.recordBootstrapVersion(); err != nil {
				return nil, err
			}
		}
	}

	pt := peer.NewTimeouts(cfg.ClusterTimeout, cfg.HeartbeatTimeout)
	var provider raft.ServerAddressProvider
	if len(cfg.DialMap) > 0 {
		provider = peer.DialMap{Peers: cfg.Peers, Dial: cfg.DialMap}
	}
	// The group's streams go through the host's listener (groupmux.go),
	// on the host's network. A DialMap (tests only:
	// cluster/peer/dialmap.go) names the proxies to dial.
	n.transport = newStoppingTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:                sh.stream,
		MaxPool:               3,
		Timeout:               10 * time.Second,
		Logger:                hlog,
		ServerAddressProvider: provider,
	}), &n.lead.stopping)

	n.fwd = forward.NewClient(forward.ClientConfig{Group: n.group, Cluster: sh.cluster, Size: cfg.ForwardConns,
		Timeout: cfg.ClusterTimeout, T: pt, Network: cfg.Network, Sentinels: sentinels})

	n.fsm = newFSM(eng, n.log, cfg.applyHook)
	n.fsm.metrics = n.metrics
	n.fsm.group = n.group
	n.fsm.onVersion = n.recordVersion
	n.fsm.onHalt = n.lead.noteHalt
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.SnapshotThreshold + cfg.SnapshotThreshold/4
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.Logger = hlog
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: start: %w", err)
	}
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, stable, snaps, n.transport)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	if n.stores != nil {
		r := n.raft
		n.stores.SetLeading(func() bool { return r.State() == raft.Leader })
		n.stores.SetOnLeaderFault(n.handOffAfterFault)
	}

	n.membership.health = newPeerHealth(cfg.ID)
	n.raft.RegisterObserver(raft.NewObserver(nil, false, n.membership.health.observe))

	if !cfg.NoBootstrap {
		var servers []raft.Server
		if len(cfg.Peers) == 0 {
			servers = []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: n.transport.LocalAddr()}}
		} else {
			// The same order on every node: the same first log entry.
			for _, id := range slices.Sorted(maps.Keys(cfg.Peers)) {
				servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(cfg.Peers[id])})
			}
		}
		// Every node bootstraps the same voters; on restart there is state
		// already and raft refuses, which is expected.
		err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}

	if f := n.raft.GetConfiguration(); f.Error() == nil {
		if servers := f.Configuration().Servers; len(servers) > 0 && !hasServer(servers, n.cfg.ID) {
			n.membership.lackedAtStart.Store(true)
		}
	}
	n.noteRemoved()

	n.batcher = newBatcher(n.raft, n.fsm, &n.cfg, n.metrics, n.life.closing)
	n.batcher.storeFault = n.storeFault
	go n.batcher.run()
	n.version.started = time.Now()
	n.life.spawn(n.monitorLeadership)
	n.life.spawn(n.sweep)
	n.life.spawn(n.announceLoop) // topology.go
	n.life.spawn(n.versionLoop)  // version.go
	n.log.Info("cluster node started", "raft", n.transport.LocalAddr(), "forward", n.fwdAddr,
		"resp", cfg.RESPAddr, "in_memory", cfg.InMemory, "log_store", cfg.LogStore, "fsync", cfg.Fsync, "start_index", n.replay.start)
	ok = true
	return n, nil
}

// lastCommandIndex returns the index of the last entry in logs that the FSM
// will see (a command or configuration; barriers and no-ops are not sent
// to it), or 0.
func lastCommandIndex(logs raft.LogStore) (uint64, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("cluster: read log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("cluster: read log: %w", err)
	}
	for i := last; i >= first && i > 0 && last-i < 1024; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			break
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i, nil
		}
	}
	return 0, nil
}

// sweep reclaims state back at its initial state. It runs locally on
// every node: such state is indistinguishable from absent state at the
// last applied time, hence at every later time the log can bring (time
// never goes backwards), so reclaiming it changes no answer and replicas
// need not agree on when it happens.
func (n *Node) sweep() {
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			n.eng.Sweep(n.eng.ClockState().Last, n.cfg.SweepKeys)
		case <-n.life.closing:
			return
		}
	}
}

// WaitReady blocks until the node can serve commands: a leader is known
// and ready (this node, or one whose forward address the log has told
// us), or until ctx ends. A server need not wait for it: meanwhile Execute
// answers LOADING or CLUSTERDOWN, as Redis clients expect.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		switch n.route().kind {
		case routeLocal, routeForward:
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			_, id := n.raft.LeaderWithID()
			return fmt.Errorf("cluster: node %s not ready (role %s, leader %q): %w",
				n.cfg.ID, roleName(n.raft.State()), id, ctx.Err())
		case <-n.life.closing:
			return ErrShuttingDown
		}
	}
}

// Close shuts the node down: no new commands, forwarding stopped, queued
// commands failed (not applied), Raft shut down, stores closed. It waits
// for Raft at most until ctx ends.
func (n *Node) Close(ctx context.Context) error {
	n.life.once.Do(func() {
		close(n.life.closing)
		n.fwd.Close()
		<-n.batcher.stopped
		n.life.bg.Wait()
		if n.stores != nil {
			n.stores.ReleaseHolds() // a follower's append held by a disk fault
		}
		done := make(chan error, 1)
		go func() { done <- n.raft.Shutdown().Error() }()
		select {
		case err := <-done:
			if err != nil {
				n.life.err = fmt.Errorf("cluster: raft shutdown: %w", err)
			}
			n.cleanup()
		case <-ctx.Done():
			// Raft may still touch the stores: leave them open.
			n.life.err = fmt.Errorf("cluster: raft shutdown: %w", ctx.Err())
		}
		n.log.Info("cluster node stopped")
	})
	return n.life.err
}

// cleanup closes what newNode opened (after Raft has stopped, or never
// ran). Raft's shutdown closes the transport itself; closing it again is
// harmless, and needed when newNode failed before Raft started.
func (n *Node) cleanup() {
	if n.transport != nil {
		if c, ok := n.transport.(raft.WithClose); ok {
			if err := c.Close(); err != nil {
				n.log.Warn("closing the raft transport", "err", err)
			}
		}
	}
	if n.stores != nil {
		if err := n.stores.Close(); err != nil {
			n.log.Warn("closing the raft log store", "store", n.cfg.LogStore, "err", err)
		}
	}
}

// commitStats returns the entries committed by this node as leader and the
// operations they carried.
func (n *Node) commitStats() (entries, ops uint64) {
	return n.batcher.entries.Load(), n.batcher.ops.Load()
}
