package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/persistence"
)

// A Host is one node process in a cluster of several Raft groups
// (docs/design.md, "Sharding"): the 16384 hash slots are split into
// contiguous ranges, one per group, and every host is a member of every
// group. Each group is a Node of its own (log, snapshots, FSM and engine,
// batcher, forwarding client); the host gives them one Raft listener
// (groupmux.go) and one forward listener, routes each operation to the
// group owning its key, and moves leaderships into balance (balance.go).
//
// A Host with one group is exactly a Node: the same data dir layout, the
// same bytes on the wire, and Execute goes straight to it.

// MaxShards is the most Raft groups a host runs.
const MaxShards = 64

// scanGroupShift places the group of a SCAN cursor above the engine's own
// cursor (lock stripe << 32 | index, stripes at most 1<<16).
const scanGroupShift = 48

// Host runs every Raft group of one node. It implements resp.Executor and
// resp.ClusterAdmin.
type Host struct {
	cfg    Config
	log    *slog.Logger
	nodes  []*Node
	table  slots.Table
	mux    *groupMux
	fwdSrv *forward.Server

	life lifecycle // node.go; in the background, the balancer
	// stopping: the host is handing over before it stops (handover.go);
	// its balancer rests.
	stopping atomic.Bool
	// started holds h.nodes once every group runs (for peers, which the
	// groups call from their own goroutines).
	started atomic.Pointer[[]*Node]
	// servedOnce: every group was ready once since the start (Starting).
	servedOnce atomic.Bool
}

// NewHost starts a host with one group per engine (len(engines) groups,
// 1 to MaxShards; each engine empty, or holding nothing worth keeping: a
// snapshot restore replaces it). It is the one way a node is built, by
// the binary and by the tests alike (these over a memnet.Inmem network,
// Config.Network). cfg is the whole host's: its DataDir is the node's
// data dir (group g's is persistence.GroupDir of it), which records the
// group count and refuses another. It opens the stores, starts every
// group's Raft, bootstraps them on first start, and returns at once;
// WaitReady waits for leaders.
func NewHost(ctx context.Context, cfg Config, engines []*engine.Engine) (*Host, error) {
	shards := len(engines)
	if shards < 1 || shards > MaxShards {
		return nil, fmt.Errorf("cluster: %d shards: want 1 to %d", shards, MaxShards)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	table, err := slots.Even(shards)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if !cfg.InMemory {
		if err := persistence.ClaimShards(cfg.DataDir, shards); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if cfg.LogStore == "" {
			// Every group keeps the store group 0 (the data dir's root) has.
			if cfg.LogStore, err = ResolveLogStore(cfg.DataDir); err != nil {
				return nil, err
			}
		}
	}
	// A cluster made by a restore talks only to itself (cluster/peer/identity.go).
	clusterID := ""
	if !cfg.InMemory {
		if clusterID, err = persistence.ClusterID(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	h := &Host{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), table: table, life: lifecycle{closing: make(chan struct{})}}
	pt := peer.NewTimeouts(cfg.ClusterTimeout, cfg.HeartbeatTimeout)
	if h.mux, err = newGroupMux(cfg.Network, cfg.RaftAddr, cfg.RaftAdvertise, pt, shards, h.log, clusterID); err != nil {
		return nil, fmt.Errorf("cluster: raft listener on %s: %w", cfg.RaftAddr, err)
	}
	ln, err := cfg.Network.Listen(cfg.ForwardAddr)
	if err != nil {
		h.mux.close()
		return nil, fmt.Errorf("cluster: forward listener on %s: %w", cfg.ForwardAddr, err)
	}
	fwdAddr := ln.Addr().String()
	if cfg.ForwardAdvertise != "" {
		fwdAddr = cfg.ForwardAdvertise
	}
	h.fwdSrv = forward.NewServer(ln, clusterID, h.log)
	for g, eng := range engines {
		gcfg := cfg
		if !cfg.InMemory {
			gcfg.DataDir = persistence.GroupDir(cfg.DataDir, g)
		}
		n, err := newNode(ctx, gcfg, eng, &groupShare{group: g, stream: h.mux.layers[g], fwdAddr: fwdAddr, cluster: clusterID, peers: h.peerAddrs})
		if err != nil {
			h.closeNodes(context.Background())
			ln.Close()
			h.mux.close()
			return nil, fmt.Errorf("cluster: group %d: %w", g, err)
		}
		h.nodes = append(h.nodes, n)
	}
	nodes := h.nodes
	h.started.Store(&nodes)
	groups := make([]forward.Group, len(nodes))
	for g, n := range nodes {
		groups[g] = fwdGroup{n}
	}
	h.fwdSrv.Serve(groups, (&ctlServer{nodes: nodes, log: h.log}).serve)
	if shards > 1 {
		h.life.spawn(h.balance) // balance.go
	}
	return h, nil
}

// peerAddrs returns member id's addresses as any group's log holds them:
// a member has the same addresses in every group.
func (h *Host) peerAddrs(id string) (codec.Leader, bool) {
	nodes := h.started.Load()
	if nodes == nil {
		return codec.Leader{}, false
	}
	for _, n := range *nodes {
		if e, ok := n.fsm.leader(id); ok && e.Forward != "" {
			return e, true
		}
	}
	return codec.Leader{}, false
}

// Groups returns the number of Raft groups.
func (h *Host) Groups() int { return len(h.nodes) }

// Group returns group g's node (tests, metrics).
func (h *Host) Group(g int) *Node { return h.nodes[g] }

// opRouting says how an operation is routed to the groups.
type opRouting uint8

const (
	toOne  opRouting = iota // the group owning its key (or group 0)
	toAll                   // every group; the results are combined
	toScan                  // the group its cursor names
)

// routeOp returns the group an operation runs in and how, by its row in
// the engine's table of operations (engine/ops.go).
func (h *Host) routeOp(op *engine.Op) (int, opRouting) {
	switch op.Code.Route() {
	case engine.RouteEvery:
		return 0, toAll
	case engine.RouteCursor:
		return int(op.Cursor >> scanGroupShift), toScan
	case engine.RouteGroup0:
		return 0, toOne
	}
	key := op.Key
	if op.Code.Keys() == engine.KeysAll {
		if len(op.All) == 0 {
			return 0, toOne
		}
		// The RESP server checked that every limit of RL.ALL is in one
		// group; every key of a rate limit request carries its domain as
		// the hash tag (rls.HashTag), so they share one slot.
		key = op.All[0].Key
	}
	return h.table.Group(slots.Of(key)), toOne
}

// Execute implements resp.Executor: every operation runs in the group
// owning its key, each group's share as one batch of that group, the
// groups in parallel; DBSIZE, KEYS, FLUSHALL and the clock commands run in
// every group, SCAN in the group its cursor names (each op's Route in the
// engine's table of operations). A group that fails
// fails its own operations (Result.Err), not the others'; the error is
// returned only when every group failed.
func (h *Host) Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	if len(h.nodes) == 1 {
		return h.nodes[0].Execute(ctx, ops, results)
	}
	if len(ops) != len(results) {
		return internalError("%d results for %d operations", len(results), len(ops))
	}
	if len(ops) == 0 {
		return nil
	}
	// The common case, a cluster-aware client's command or pipeline: one
	// group, no copy.
	g, how := h.routeOp(&ops[0])
	one := how == toOne
	for i := 1; one && i < len(ops); i++ {
		gi, how := h.routeOp(&ops[i])
		one = how == toOne && gi == g
	}
	if one {
		return h.nodes[g].Execute(ctx, ops, results)
	}
	return h.executeSplit(ctx, ops, results)
}

// groupPart is one group's part of a split batch.
type groupPart struct {
	ops     []engine.Op
	idx     []int // idx[j]: the index in the caller's batch of ops[j]
	results []engine.Result
	err     error
}

func (h *Host) executeSplit(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	parts := make([]groupPart, len(h.nodes))
	add := func(g, i int, op engine.Op) {
		parts[g].ops = append(parts[g].ops, op)
		parts[g].idx = append(parts[g].idx, i)
	}
	for i := range ops {
		g, how := h.routeOp(&ops[i])
		switch how {
		case toAll:
			for g := range parts {
				add(g, i, ops[i])
			}
		case toScan:
			if g >= len(parts) {
				results[i] = engine.Result{} // past the last group: done
				continue
			}
			op := ops[i]
			op.Cursor &= 1<<scanGroupShift - 1
			add(g, i, op)
		default:
			add(g, i, ops[i])
		}
	}
	var wg sync.WaitGroup
	for g := range parts {
		p := &parts[g]
		if len(p.ops) == 0 {
			continue
		}
		p.results = make([]engine.Result, len(p.ops))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.err = h.nodes[g].Execute(ctx, p.ops, p.results)
		}()
	}
	wg.Wait()

	failed, ran := 0, 0
	var firstErr error
	seen := make([]bool, len(ops))
	for g := range parts {
		p := &parts[g]
		if len(p.ops) == 0 {
			continue
		}
		ran++
		if p.err != nil {
			failed++
			if firstErr == nil || mayHaveApplied(p.err) { // UNCERTAIN wins: it may hide a charge
				firstErr = p.err
			}
		}
		for j, i := range p.idx {
			r := p.results[j]
			if p.err != nil {
				r = engine.Result{Err: p.err}
			}
			if !seen[i] {
				seen[i] = true
				results[i] = r
				if ops[i].Code.Route() == engine.RouteCursor {
					results[i].Cursor = scanCursor(g, len(parts), r.Cursor)
				}
				continue
			}
			mergeResult(ops[i].Code, &results[i], &r)
		}
	}
	if failed == ran {
		return firstErr
	}
	return nil
}

// scanCursor is the cursor SCAN replies after a step of group g that
// ended at the engine cursor c (0: the group is done).
func scanCursor(g, groups int, c uint64) uint64 {
	if c != 0 {
		return uint64(g)<<scanGroupShift | c
	}
	if g+1 < groups {
		return uint64(g+1) << scanGroupShift
	}
	return 0
}

// mergeResult folds one more group's result r of an operation run in
// every group into acc, as the op's Merge says. A write that failed in some group and ran in
// another may have been partly applied: UNCERTAIN, whatever the failure
// said.
func mergeResult(code engine.OpCode, acc, r *engine.Result) {
	if acc.Err != nil || r.Err != nil {
		if code.Mutates() && (acc.Err == nil || r.Err == nil || mayHaveApplied(acc.Err) || mayHaveApplied(r.Err)) {
			acc.Err = &errcode.Error{Code: errcode.Uncertain, Detail: "applied in some shards only"}
		} else if acc.Err == nil {
			acc.Err = r.Err
		}
		return
	}
	switch code.Merge() {
	case engine.MergeSum:
		acc.Count += r.Count
	case engine.MergeConcat:
		acc.Keys = append(acc.Keys, r.Keys...)
	}
	// MergeFirst, the clock commands: group 0's reply (each group's clock
	// moved alike).
}

func mayHaveApplied(err error) bool {
	e := errcode.Of(err)
	return e != nil && e.Code.Class() == errcode.MayHaveApplied
}

// Status implements resp.ClusterAdmin: group g's RAFT.STATUS fields.
func (h *Host) Status(g int) [][2]string {
	st := h.nodes[g].Status()
	if len(h.nodes) > 1 {
		r := h.table.Range(g)
		st = append(st, [2]string{"group", strconv.Itoa(g)},
			[2]string{"slots", strconv.Itoa(r.First) + "-" + strconv.Itoa(r.Last)})
	}
	return st
}

// Join implements resp.ClusterAdmin (RAFT.JOIN id raft_addr): the node
// becomes a non-voter, then a voter once caught up, of every group, each
// on its own leader (membership.go), all groups at once. It returns when
// the node votes in every group, else the error of the first group that
// failed, naming it; calling it again resumes.
func (h *Host) Join(ctx context.Context, id, raftAddr string) error {
	n0 := h.nodes[0]
	if err := n0.checkJoin(id, raftAddr); err != nil {
		return err
	}
	if !n0.isMember(id) {
		// A typo in the address is refused before any group changes.
		nc, err := h.cfg.Network.Dial(peer.MapAddr(h.cfg.DialMap, raftAddr), forward.DialTimeout)
		if err != nil {
			return &errcode.Error{Code: errcode.BadRaftAddr, Detail: "cannot reach " + raftAddr + ": " + err.Error()}
		}
		nc.Close()
	}
	return h.eachGroup(ctx, opJoin, id, raftAddr)
}

// Remove implements resp.ClusterAdmin (RAFT.REMOVE id): every group's
// leader first checks that the removal leaves it a majority of healthy
// voters, then the node leaves every group (a leader it is hands its
// leadership over first).
func (h *Host) Remove(ctx context.Context, id string) error {
	known := false
	for _, n := range h.nodes {
		known = known || n.isMember(id)
	}
	if !known {
		return &errcode.Error{Code: errcode.NoSuchNode, Detail: id}
	}
	if err := h.eachGroup(ctx, opRemoveCheck, id, ""); err != nil {
		return err
	}
	return h.eachGroup(ctx, opRemove, id, "")
}

// eachGroup runs a membership step in every group at once and returns the
// first group's error, naming the group.
func (h *Host) eachGroup(ctx context.Context, op memberOp, id, raftAddr string) error {
	errs := h.inEveryGroup(func(_ int, n *Node) error { return n.runMember(ctx, op, id, raftAddr) })
	for g, err := range errs {
		if err != nil {
			h.log.Warn("membership step failed", "op", op.String(), "id", id, "group", g, "err", err)
			return groupError(op, g, err)
		}
	}
	return nil
}

// Transfer implements resp.ClusterAdmin: group g's leadership, from this
// node (its leader) to id, or to any voter when id is "".
func (h *Host) Transfer(ctx context.Context, g int, id string) error {
	return h.nodes[g].Transfer(ctx, id)
}

// Snapshot implements resp.ClusterAdmin: every group snapshots.
func (h *Host) Snapshot(ctx context.Context) error {
	for _, n := range h.nodes {
		if err := n.Snapshot(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Topology implements resp.ClusterAdmin: the members (group 0's
// configuration; every group has the same) and every group's range and
// leader.
func (h *Host) Topology() slots.Topology {
	t := slots.Topology{Self: h.cfg.ID, Nodes: h.nodes[0].voters()}
	for g, n := range h.nodes {
		_, leader := n.raft.LeaderWithID()
		t.Groups = append(t.Groups, slots.Group{Range: h.table.Range(g), Leader: string(leader)})
		if term := n.raft.CurrentTerm(); term > t.Epoch {
			t.Epoch = term
		}
	}
	return t
}

// Route implements resp.ClusterAdmin for group g.
func (h *Host) Route(g int) (addr string, local bool) {
	if g < 0 || g >= len(h.nodes) {
		return "", false
	}
	return h.nodes[g].leaderRESP()
}

// WaitReady waits until every group can serve commands.
func (h *Host) WaitReady(ctx context.Context) error {
	for _, n := range h.nodes {
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Ready reports whether every group can serve commands now (/readyz).
func (h *Host) Ready() error {
	for g, n := range h.nodes {
		if err := n.Ready(); err != nil {
			if len(h.nodes) == 1 {
				return err
			}
			return fmt.Errorf("group %d: %w", g, err)
		}
	}
	return nil
}

// Starting implements resp.Starter: ErrLoading until every group was
// ready (Ready) once since the host started, then nil for good; PING, INFO
// and CLUSTER INFO answer as a loading node meanwhile (ErrRemoved instead
// on a node started after its removal).
func (h *Host) Starting() error {
	if h.servedOnce.Load() {
		return nil
	}
	if err := h.Ready(); err != nil {
		if errors.Is(err, ErrRemoved) {
			return ErrRemoved // it will not serve: no LOADING
		}
		return ErrLoading
	}
	h.servedOnce.Store(true)
	return nil
}

// Collector returns the groups' metrics: one group's as a Node's, several
// with a "group" label.
func (h *Host) Collector() prometheus.Collector {
	if len(h.nodes) == 1 {
		return h.nodes[0].Collector()
	}
	var cs multiCollector
	for g, n := range h.nodes {
		cs = append(cs, prometheus.WrapCollectorWith(prometheus.Labels{"group": strconv.Itoa(g)}, n.Collector()))
	}
	return cs
}

// multiCollector is several collectors as one.
type multiCollector []prometheus.Collector

func (m multiCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m {
		c.Describe(ch)
	}
}

func (m multiCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m {
		c.Collect(ch)
	}
}

// Close stops every group (in parallel: each waits for its Raft to shut
// down), then the listeners.
func (h *Host) Close(ctx context.Context) error {
	h.life.once.Do(func() {
		close(h.life.closing)
		h.life.bg.Wait()
		h.fwdSrv.Close()
		h.life.err = h.closeNodes(ctx)
		h.mux.close()
	})
	return h.life.err
}

func (h *Host) closeNodes(ctx context.Context) error {
	return errors.Join(h.inEveryGroup(func(_ int, n *Node) error { return n.Close(ctx) })...)
}

// inEveryGroup runs f on every group's node at once and returns their
// errors, indexed by group.
func (h *Host) inEveryGroup(f func(g int, n *Node) error) []error {
	errs := make([]error, len(h.nodes))
	var wg sync.WaitGroup
	for g, n := range h.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = f(g, n)
		}()
	}
	wg.Wait()
	return errs
}
