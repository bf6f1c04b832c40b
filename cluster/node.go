// Package cluster replicates sluice's engine with Raft: a Host (host.go) is
// the resp.Executor and resp.ClusterAdmin of a server process, and runs one
// Node per Raft group (one by default), each a voter of its group's cluster
// or a single durable voter on its own.
//
// Every operation, reads included, goes through the Raft log and is answered
// from the result the FSM computed when its entry applied: the same log
// gives every replica the same state, and every answer is linearizable by
// construction (a read is ordered after every write committed before it).
// batcher.go explains the group commit that makes this fast; fwdframe.go how
// followers hand commands to the leader; fsm.go the state machine and its
// snapshots.
//
// Lock order. The package's mutexes are leaves: none is held while another
// is taken, while raft is called, or while the engine is called, except
// that fwdConn.die takes fwdClient.mu after releasing fwdConn.mu. The engine
// takes its own shard locks only inside the FSM's calls (apply, snapshot,
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
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/logstore"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/persistence"
)

// Node is one Raft voter of one group, running that group's engine. It
// implements resp.Executor; its admin methods serve the Host's, which
// implements resp.ClusterAdmin.
type Node struct {
	// recordedVersion is the cluster version the data dir recorded at
	// start (0 for none): this node's log reached it, so the group runs at
	// least that version even while the log replays (gateVersion).
	recordedVersion uint32
	// bootVersion is the cluster version this node bootstrapped its group
	// at, when it did at this start (0 otherwise): the gate trusts it until
	// a leader of the group was ready (gateVersion).
	bootVersion uint32
	// started is when the node started: Ready gives a new node's group
	// versionSettle to reach the newest cluster version (metrics.go).
	started time.Time
	cfg     Config
	log     *slog.Logger
	eng     *engine.Engine
	fsm     *fsm
	raft    *raft.Raft
	batcher *batcher
	fwd     *fwdClient
	fwdAddr string       // the host's advertised forward address
	group   int          // the Raft group this node is a member of
	metrics *nodeMetrics // metrics.go
	timers  timerPool    // deadline timers of Execute and forwarded requests

	stores    *logstore.Stores // nil in memory
	transport raft.Transport

	// startIndex is the index of the last command entry in the log at
	// start: until the FSM has applied it, the node is replaying.
	startIndex uint64
	replayed   atomic.Bool
	// soloVoter: the configuration last seen has this node as its only
	// voter (readLocally).
	soloVoter atomic.Bool
	// removed: the group's latest configuration no longer has this node,
	// which was a member (noteRemoved); it serves the group no more.
	// member: a configuration seen since the start had it; lackedAtStart:
	// the log's configuration at start did not (a node removed while it
	// was down).
	removed, member, lackedAtStart atomic.Bool
	// handingOff: handOffAfterFault is running (diskhandoff.go).
	handingOff atomic.Bool
	// readyTerm is the term in which this node, as leader, finished its
	// barrier and announced its address; 0 when not.
	readyTerm atomic.Uint64
	// health is what this node, as leader, knows of its followers from its
	// heartbeats; memberBusy counts the membership steps it is running
	// (membership.go).
	health     *peerHealth
	memberBusy atomic.Int32

	// dataDir is the group's data dir (nil in memory), where the FSM's
	// cluster version is recorded as it rises (version.go).
	dataDir *persistence.DataDir
	// versionKick wakes versionLoop for a member that told this leader
	// its version; haltCh tells monitorLeadership that the FSM halted.
	versionKick chan string
	haltCh      chan struct{}
	// stopping: the node is handing over before it stops (handover.go),
	// and refuses leadership transfers to itself.
	stopping atomic.Bool
	// transferring counts this node's leadership transfers under way:
	// meanwhile Raft refuses new entries, and commands wait (route).
	transferring atomic.Int32
	// peers looks up a member's addresses in the other groups of this
	// node's host, for a group whose log has not told it yet (a node
	// still replaying at start).
	peers func(id string) (codec.Leader, bool)

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	bg        sync.WaitGroup // leadership monitor, sweeper
}

// groupShare is what the groups of a Host share (host.go): the Raft
// listener, through the group's own stream layer, and the forward
// listener.
type groupShare struct {
	group   int
	stream  *groupStream
	fwdAddr string // the host's advertised forward address
	cluster string // the cluster identity (identity.go), "" for none
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
		closing: make(chan struct{}),

		versionKick: make(chan string, 16),
		haltCh:      make(chan struct{}, 1),
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
		if n.recordedVersion, err = dir.ClusterVersion(); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.dataDir = &dir
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
	if n.startIndex, err = lastCommandIndex(logs); err != nil {
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
	}), &n.stopping)

	n.fwd = newFwdClient(n.group, cfg.ForwardConns, cfg.ClusterTimeout, pt, cfg.Network, n.log)
	n.fwd.cluster = sh.cluster

	n.fsm = newFSM(eng, n.log, cfg.applyHook)
	n.fsm.metrics = n.metrics
	n.fsm.group = n.group
	n.fsm.onVersion = n.recordVersion
	n.fsm.onHalt = func() {
		select {
		case n.haltCh <- struct{}{}:
		default:
		}
	}
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

	n.health = newPeerHealth(cfg.ID)
	n.raft.RegisterObserver(raft.NewObserver(nil, false, n.health.observe))

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
			n.lackedAtStart.Store(true)
		}
	}
	n.noteRemoved()

	n.batcher = newBatcher(n.raft, n.fsm, &n.cfg, n.metrics, n.closing)
	n.batcher.storeFault = n.storeFault
	go n.batcher.run()
	n.started = time.Now()
	n.bg.Add(4)
	go n.monitorLeadership()
	go n.sweep()
	go n.announceLoop() // topology.go
	go n.versionLoop()  // version.go
	n.log.Info("cluster node started", "raft", n.transport.LocalAddr(), "forward", n.fwdAddr,
		"resp", cfg.RESPAddr, "in_memory", cfg.InMemory, "log_store", cfg.LogStore, "fsync", cfg.Fsync, "start_index", n.startIndex)
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

// Execute implements resp.Executor: it runs ops as one batch through the
// log, on the leader directly or forwarded to it, and fills results.
//
// Errors (coded: internal/errcode): ErrClusterDown's kind when the
// batch was certainly not applied and no majority took it within
// ClusterTimeout (there is no leader, or it cannot reach a quorum);
// ErrUncertain's kind when it may have been applied but no outcome came
// (handed to Raft and no answer in time, the connection to the leader
// broke and no re-send was answered in time, leadership changed and the
// log did not tell the entry's fate in time); ErrLoading when this node
// was still replaying its log, with no leader to forward to, for the whole
// timeout; ErrShuttingDown after Close. Batches that certainly did not
// reach the log (not the leader any more, a leadership transfer, no leader
// yet) are routed again within the timeout; a forwarded batch that may
// have reached it is sent again only with its batch ID, which the log
// applies at most once.
func (n *Node) Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	if len(ops) != len(results) {
		return internalError("%d results for %d operations", len(results), len(ops))
	}
	if len(ops) == 0 {
		return nil
	}
	select {
	case <-n.closing:
		return ErrShuttingDown
	default:
	}
	if n.fsm.halted() != nil {
		return n.fsm.haltError()
	}
	if n.removed.Load() {
		return ErrRemoved
	}
	if cv := n.gateVersion(); n.fsm.needs.gated(cv, ops) {
		// A node still starting (replaying its log, its leader not ready
		// yet) may be about to learn a higher version: wait for a ready
		// leader (bounded by the cluster timeout), then look again.
		wctx, cancel := context.WithTimeout(ctx, n.cfg.ClusterTimeout)
		_ = n.WaitReady(wctx)
		cancel()
		if cv = n.gateVersion(); n.fsm.needs.gated(cv, ops) {
			return n.executeGated(ctx, cv, ops, results)
		}
	}
	return n.execute(ctx, ops, results)
}

// executeGated answers the ops of a batch that the group's cluster version
// cv refuses (version.go, refusal: errcode.ClusterVersion for an op the
// version does not have; not applied, never proposed), and runs the others
// as one batch.
func (n *Node) executeGated(ctx context.Context, cv uint32, ops []engine.Op, results []engine.Result) error {
	var idx []int
	var sub []engine.Op
	for i := range ops {
		if err := n.fsm.needs.refusal(cv, &ops[i]); err != nil {
			results[i] = engine.Result{Err: err}
			continue
		}
		idx = append(idx, i)
		sub = append(sub, ops[i])
	}
	if len(sub) == 0 {
		return nil
	}
	subResults := make([]engine.Result, len(sub))
	if err := n.execute(ctx, sub, subResults); err != nil {
		return err
	}
	for j, i := range idx {
		results[i] = subResults[j]
	}
	return nil
}

// execute is Execute past the halt and the gate: a loop over tries, each
// routed (route: apply here, forward to the leader, wait), whose attempt
// (outcome.go) says what comes next: the answer, route again (not
// applied), send again with the same batch ID (written to a leader, fate
// unknown), or UNCERTAIN once a leader is known again (handed to Raft
// here, fate unknown).
func (n *Node) execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	start := time.Now()
	until := start.Add(n.cfg.ClusterTimeout)
	deadline := n.timers.get(n.cfg.ClusterTimeout)
	defer n.timers.put(deadline)
	var (
		pause   *time.Timer
		id      codec.BatchID // given at the first forward, kept by every later try
		sent    bool          // a try was written and its outcome is unknown
		loading bool          // the last try found the node replaying
	)
	for {
		var a attempt
		switch kind, addr := n.route(); kind {
		case routeLocal:
			// After a forwarded try that may have applied, only with its
			// ID (this node became the leader meanwhile).
			a = n.batcher.submitID(ctx, deadline.C, id, ops, results)
		case routeForward:
			if id == (codec.BatchID{}) {
				id = n.fwd.newBatchID()
			}
			a = n.fwd.forward(ctx, deadline.C, until, addr, id, ops, results)
			if a.kind != tryNotApplied && a.kind != tryWritten {
				n.metrics.forwarded(len(ops))
			}
			if a.kind == tryWritten || a.kind == tryUnknown {
				// Written, then the connection broke or the leader lost its
				// leadership: send it again, same ID, while that is safe.
				sent = true
				if time.Since(start) >= fwdResendWindow {
					return errConnLost
				}
				a = notApplied(nil)
			}
		case routeLoading:
			// Still replaying, and no leader to forward to known yet: hold
			// the batch as while there is no leader (the replay soon tells
			// the leader's address); LOADING if that takes the whole
			// timeout.
			loading = true
			a = notApplied(nil)
		default:
			loading = false
			a = notApplied(nil)
		}
		switch a.kind {
		case tryDone:
			if e := errcode.Of(a.err); sent && e != nil && e.Code.Class() == errcode.Unavailable {
				// This try was not applied, but an earlier one may have been.
				return giveUpError(true, stopDeadline, a.err, n.cfg.ClusterTimeout)
			}
			return a.err
		case tryUnknown: // handed to Raft here
			return n.awaitLeaderAfterLoss(ctx, deadline.C)
		}
		// Not applied: route again shortly.
		if !sent && time.Since(start) >= misconfWait {
			// No leader to take it, and this node's own log cannot be
			// written: say so (disk faults, cluster/logstore/faultstore.go),
			// or answer reads from the state when no other node can have
			// moved on.
			if f := n.storeFault(); f != nil {
				if n.readLocally(ops, results) {
					return nil
				}
				return f
			}
		}
		if pause == nil {
			pause = time.NewTimer(retryPause)
			defer pause.Stop()
		} else {
			pause.Reset(retryPause)
		}
		select {
		case <-pause.C:
		case <-deadline.C:
			notApplied := clusterDownError(n.cfg.ClusterTimeout)
			if loading {
				notApplied = ErrLoading
			}
			return giveUpError(sent, stopDeadline, notApplied, n.cfg.ClusterTimeout)
		case <-ctx.Done():
			return giveUpError(sent, stopCanceled, fmt.Errorf("cluster: execute: %w", ctx.Err()), n.cfg.ClusterTimeout)
		case <-n.closing:
			return giveUpError(sent, stopClosed, ErrShuttingDown, n.cfg.ClusterTimeout)
		}
	}
}

// awaitLeaderAfterLoss decides how to report a batch whose outcome became
// unknown when leadership changed: UNCERTAIN either way, saying whether a
// leader is known again before the command's deadline (the cluster works)
// or none is (no majority).
func (n *Node) awaitLeaderAfterLoss(ctx context.Context, deadline <-chan time.Time) error {
	t := time.NewTicker(retryPause)
	defer t.Stop()
	for {
		if kind, _ := n.route(); kind == routeLocal || kind == routeForward {
			return ErrOutcomeUnknown
		}
		select {
		case <-t.C:
		case <-deadline:
			return lostQuorumError(n.cfg.ClusterTimeout)
		case <-ctx.Done():
			return ErrOutcomeUnknown
		case <-n.closing:
			return ErrOutcomeUnknown
		}
	}
}

// retryPause is how long Execute waits before routing again while there
// is no usable leader (an election, a new leader's barrier).
const retryPause = 5 * time.Millisecond

type routeKind int

const (
	routeWait    routeKind = iota // no usable leader yet
	routeLocal                    // this node leads and is ready
	routeForward                  // forward to the leader's address
	routeLoading                  // still replaying, and nothing better known
)

// route says where a batch should go now.
//
// A node still replaying its log at start forwards to the leader whenever
// it knows the leader's forward address: from its own log, or else from
// another group of its host (every group of a member has the same
// address); routeLoading only when it knows none (or leads while
// replaying).
func (n *Node) route() (routeKind, string) {
	if n.raft.State() == raft.Leader {
		if n.transferring.Load() > 0 {
			return routeWait, "" // Raft refuses entries until it is done
		}
		if n.readyTerm.Load() == n.raft.CurrentTerm() {
			return routeLocal, ""
		}
		if !n.isReplayed() {
			return routeLoading, ""
		}
		return routeWait, ""
	}
	_, id := n.raft.LeaderWithID()
	if id == "" || string(id) == n.cfg.ID {
		return routeWait, ""
	}
	if e, ok := n.fsm.leader(string(id)); ok && e.Forward != "" {
		return routeForward, peer.MapAddr(n.cfg.DialMap, e.Forward)
	}
	if e, ok := n.peers(string(id)); ok && e.Forward != "" {
		return routeForward, peer.MapAddr(n.cfg.DialMap, e.Forward)
	}
	if !n.isReplayed() {
		return routeLoading, ""
	}
	return routeWait, ""
}

// isReplayed reports whether the FSM has applied the log this node started
// with.
func (n *Node) isReplayed() bool {
	if n.replayed.Load() {
		return true
	}
	if n.fsm.applied.Load() >= n.startIndex {
		n.replayed.Store(true)
		return true
	}
	return false
}

// acceptForwarded queues a batch forwarded by a follower, if this node is
// the ready leader. Otherwise it returns no request and the status to
// answer: retry (not applied; the follower routes again) or an error.
func (n *Node) acceptForwarded(ctx context.Context, deadline <-chan time.Time, id codec.BatchID, ops []engine.Op, results []engine.Result) (*request, byte, error) {
	if n.fsm.halted() != nil {
		return nil, fwdStatusRetry, errors.New("this node stopped applying the log")
	}
	// The follower gated its ops with its own view of the version, which
	// is never ahead of the leader's; this catches a follower of a newer
	// release sending an operation this one does not know.
	if cv := n.gateVersion(); n.fsm.needs.gated(cv, ops) {
		for i := range ops {
			if err := n.fsm.needs.refusal(cv, &ops[i]); err != nil {
				return nil, fwdStatusError, err
			}
		}
	}
	switch kind, _ := n.route(); kind {
	case routeLocal:
		req, err := n.batcher.enqueue(ctx, deadline, id, ops, results)
		if err != nil {
			return nil, fwdStatusError, err
		}
		return req, 0, nil
	}
	// Not the ready leader (a follower, an election, a transfer, or a
	// leader still replaying): the follower holds the batch and routes it
	// again, rather than failing it with LOADING.
	return nil, fwdStatusRetry, errors.New("not the ready leader")
}

// monitorLeadership makes a new leader ready: a barrier (every entry of
// earlier terms applied here), then an entry announcing its addresses.
func (n *Node) monitorLeadership() {
	defer n.bg.Done()
	for {
		select {
		case leader := <-n.raft.LeaderCh():
			n.readyTerm.Store(0)
			if leader && n.fsm.halted() != nil {
				n.handOffHalted()
			} else if leader {
				n.becomeReady()
			}
			if leader && n.stopping.Load() {
				// Elected while handing over before a stop (a transfer to
				// it is refused, an election is not): hand over again.
				go n.handOffAgain()
			}
		case <-n.haltCh:
			if n.raft.State() == raft.Leader {
				n.handOffHalted()
			}
		case <-n.closing:
			return
		}
	}
}

// handOffHalted hands the leadership of a group this node cannot apply
// any more to another voter, so the group goes on without it.
func (n *Node) handOffHalted() {
	n.readyTerm.Store(0)
	n.log.Error("this node leads a group whose log it stopped applying: handing the leadership over", "group", n.group)
	if err := n.waitWhileLeader(n.raft.LeadershipTransfer()); err != nil && n.raft.State() == raft.Leader {
		n.log.Error("handing over the leadership of a halted group failed", "group", n.group, "err", err)
	}
}

// recordVersion records in the data dir that the log reached cluster
// version v (the FSM calls it as the version rises), so that a binary that
// cannot run v refuses the data dir at start.
func (n *Node) recordVersion(v uint32) {
	if n.dataDir == nil {
		return
	}
	if err := n.dataDir.RecordClusterVersion(v, "sluice "+releaseOf(v)+" or later"); err != nil {
		n.log.Error("recording the cluster version in the data dir failed: an older binary started on it would not refuse it",
			"cluster_version", v, "err", err)
	}
}

func (n *Node) becomeReady() {
	for n.raft.State() == raft.Leader {
		term := n.raft.CurrentTerm()
		start := time.Now()
		// The barrier waits for every earlier entry to apply here, which
		// after a restart is the whole replay: no deadline but leadership.
		err := n.waitWhileLeader(n.raft.Barrier(n.cfg.ClusterTimeout))
		if err == nil {
			n.replayed.Store(true)
			// Before the announcement: a follower forwards to this
			// leader once it sees its address, and by then the version
			// entry has applied there too.
			err = n.raiseToRecorded()
		}
		if err == nil {
			entry := codec.AppendLeaderEntry(nil, codec.Leader{ID: n.cfg.ID, RESP: n.cfg.RESPAddr, Forward: n.fwdAddr})
			err = n.waitWhileLeader(n.raft.Apply(entry, n.cfg.ClusterTimeout))
		}
		if err == nil {
			n.noteSoloVoter() // for readLocally, while Raft's loop is free
			n.raiseVersionAlone()
			n.readyTerm.Store(term)
			n.log.Info("leader ready", "term", term, "barrier", time.Since(start).Round(time.Microsecond))
			select {
			case n.versionKick <- "": // a new leader looks at the version at once (version.go)
			default:
			}
			return
		}
		select {
		case <-n.closing:
			return
		default:
		}
		if n.raft.State() == raft.Leader {
			n.log.Warn("new leader: barrier or announcement failed; retrying", "term", term, "err", err)
			time.Sleep(retryPause)
		}
	}
}

// waitWhileLeader waits for f until it resolves, this node stops leading
// (a raft future may never resolve: raft#498), or the node closes.
func (n *Node) waitWhileLeader(f raft.Future) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-t.C:
			if n.raft.State() != raft.Leader {
				return raft.ErrLeadershipLost
			}
		case <-n.closing:
			return ErrShuttingDown
		}
	}
}

// waitFuture waits for f with a deadline of its own, since a raft future
// may never resolve (raft#498).
func waitFuture(closing <-chan struct{}, f raft.Future, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		return clusterDownError(timeout)
	case <-closing:
		return ErrShuttingDown
	}
}

// sweep reclaims state back at its initial state. It runs locally on
// every node: such state is indistinguishable from absent state at the
// last applied time, hence at every later time the log can bring (time
// never goes backwards), so reclaiming it changes no answer and replicas
// need not agree on when it happens.
func (n *Node) sweep() {
	defer n.bg.Done()
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			n.eng.Sweep(n.eng.ClockState().Last, n.cfg.SweepKeys)
		case <-n.closing:
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
		switch kind, _ := n.route(); kind {
		case routeLocal, routeForward:
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			_, id := n.raft.LeaderWithID()
			return fmt.Errorf("cluster: node %s not ready (role %s, leader %q): %w",
				n.cfg.ID, roleName(n.raft.State()), id, ctx.Err())
		case <-n.closing:
			return ErrShuttingDown
		}
	}
}

// Close shuts the node down: no new commands, forwarding stopped, queued
// commands failed (not applied), Raft shut down, stores closed. It waits
// for Raft at most until ctx ends.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		close(n.closing)
		n.fwd.close()
		<-n.batcher.stopped
		n.bg.Wait()
		if n.stores != nil {
			n.stores.ReleaseHolds() // a follower's append held by a disk fault
		}
		done := make(chan error, 1)
		go func() { done <- n.raft.Shutdown().Error() }()
		select {
		case err := <-done:
			if err != nil {
				n.closeErr = fmt.Errorf("cluster: raft shutdown: %w", err)
			}
			n.cleanup()
		case <-ctx.Done():
			// Raft may still touch the stores: leave them open.
			n.closeErr = fmt.Errorf("cluster: raft shutdown: %w", ctx.Err())
		}
		n.log.Info("cluster node stopped")
	})
	return n.closeErr
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

// misconfWait is how long Execute looks for a leader, while this node's
// log cannot be written, before it answers MISCONF: long enough for the
// other nodes to elect a leader once this one stepped down, well within
// the second the contract allows.
const misconfWait = 500 * time.Millisecond

// storeFault returns the MISCONF error while this node's log store cannot
// be written, else nil.
func (n *Node) storeFault() error {
	if n.stores == nil {
		return nil
	}
	return n.stores.Fault()
}

// readLocally answers ops from this node's engine when they are all reads
// and this node is the group's only voter, whose log cannot be written:
// nothing can commit anywhere meanwhile, so the state once every committed
// entry has applied is the latest, and the ops read it at the clock's last
// applied time (so that they record no time). It reports whether it
// answered.
func (n *Node) readLocally(ops []engine.Op, results []engine.Result) bool {
	for i := range ops {
		if ops[i].Code.Mutates() {
			return false
		}
	}
	// Raft's main loop may be held in a write of its term (the disk is
	// full: cluster/logstore/faultstore.go): then the configuration last
	// seen stands.
	n.noteSoloVoter()
	if !n.soloVoter.Load() {
		return false
	}
	for deadline := time.Now().Add(time.Second); n.fsm.applied.Load() < n.raft.CommitIndex(); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	cs := n.eng.ClockState()
	n.eng.Apply(cs.Last-cs.Offset, ops, results)
	return true
}

// noteSoloVoter records whether this node is its group's only voter, from
// the latest configuration, when Raft answers within 200 ms.
func (n *Node) noteSoloVoter() {
	if f := n.raft.GetConfiguration(); waitFuture(n.closing, f, 200*time.Millisecond) == nil {
		servers := f.Configuration().Servers
		n.soloVoter.Store(len(servers) == 1 && string(servers[0].ID) == n.cfg.ID && servers[0].Suffrage == raft.Voter)
	}
}
