package cluster

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// fsm is the replicated state machine: the engine plus the map of leader
// addresses learned from the log. Raft calls ApplyBatch, Snapshot and
// Restore from one goroutine; the mutex only guards the address map against
// readers on other goroutines (Execute, Status).
type fsm struct {
	eng     *engine.Engine
	log     *slog.Logger
	hook    func()
	metrics *nodeMetrics  // nil in tests that build an fsm alone
	applied atomic.Uint64 // index of the last entry applied

	// Scratch, owned by the FSM goroutine: the decoded ops of the entry
	// being applied (they alias its data), and results nobody waits for.
	ops     []engine.Op
	results []engine.Result
	spans   []codec.Span

	// dedup is the set of forwarded batches applied (dedup.go); owned by
	// the FSM goroutine like the engine's state.
	dedup *dedupSet
	// replies keeps the results of the forwarded batches applied lately
	// (dedup.go); owned by the FSM goroutine, not in snapshots.
	replies *replyCache

	// version is the cluster version the log has reached (version.go):
	// BaseVersion until a version entry applies. needs is the gate's
	// lookup of the operations' versions.
	version atomic.Uint32
	needs   *opNeeds
	// onVersion, when set, is called on the FSM goroutine when the
	// version rises (the node records it in its data dir); onHalt when
	// the FSM halts (the node hands its leadership away). Set before Raft
	// starts.
	onVersion func(uint32)
	onHalt    func()
	group     int // for messages
	// halt is set, once, when an entry cannot be applied: from then on
	// the FSM applies nothing more (never a skipped entry), refuses to
	// snapshot (a snapshot would claim the skipped entries), and the
	// node refuses the group's commands (Node.Execute).
	halt atomic.Pointer[applyHalt]

	mu      sync.RWMutex
	leaders map[string]codec.Leader // by ID; guarded by mu

	// awaited holds the entries this node handed to Raft whose callers
	// wait for results, by entry ID (entryID: a hash of the entry's bytes,
	// so the FSM recognises an entry whether Raft hands it the submitted
	// slice or a copy read back from the log), counted, since two entries
	// may be byte for byte the same. Only those get results of their own;
	// every other entry (all of a follower's) reuses f.results. A hash
	// collision only gives an entry results of its own that nobody reads.
	// awaitMu is a leaf lock: nothing is taken while it is held.
	awaitMu sync.Mutex
	awaited map[uint64]int // entry ID -> waiters; guarded by awaitMu
	// outcomes holds the results of awaited entries by log index, for the
	// waiters that lost their leadership before Raft answered them
	// (commit.go, resolve): they learn here whether their entry
	// committed, and what it decided. Guarded by awaitMu; an outcome goes
	// when its waiter forgets the entry.
	outcomes map[uint64]entryOutcome
	// restores counts snapshot restores: a restore moves applied past
	// entries the FSM never saw one by one.
	restores atomic.Uint64
}

// entryOutcome is what an awaited entry decided when it applied.
type entryOutcome struct {
	id      uint64 // entryID of its bytes
	results []engine.Result
}

// applyHalt is why and where an FSM stopped applying its log.
type applyHalt struct {
	index uint64
	err   error
}

// String is the halt as RAFT.STATUS's apply_error shows it.
func (h *applyHalt) String() string {
	return "log index " + strconv.FormatUint(h.index, 10) + ": " + h.err.Error()
}

// maxScratch bounds the ops the FSM's scratch buffers keep room for: a huge
// pipeline gets buffers of its own, not a lasting one.
const maxScratch = 4096

// Snapshot meta keys.
const (
	metaApplied   = "applied"
	metaLeaderPfx = "leader."
	// metaWatchPfx numbers the chunks of the engine's WATCH registrations
	// (engine.ExportWatches), in order: part of the replicated state.
	metaWatchPfx = "watch."
	// metaVersion is the cluster version, present only above BaseVersion
	// so that a snapshot of a version 1 cluster is byte for byte what
	// v0.1.0 writes (which ignores keys it does not know anyway).
	metaVersion = "cluster_version"
)

func newFSM(eng *engine.Engine, log *slog.Logger, hook func()) *fsm {
	f := &fsm{eng: eng, log: log, hook: hook, leaders: make(map[string]codec.Leader), awaited: make(map[uint64]int),
		outcomes: make(map[uint64]entryOutcome), dedup: newDedupSet(), replies: newReplyCache(), needs: opNeedsTable()}
	f.version.Store(BaseVersion)
	return f
}

// clusterVersion is the cluster version the applied log has reached.
func (f *fsm) clusterVersion() uint32 { return f.version.Load() }

// halted returns why the FSM stopped applying, or nil.
func (f *fsm) halted() *applyHalt { return f.halt.Load() }

// stop halts the FSM at the entry index: nothing more is applied. It logs
// the reason (once) and tells the node.
func (f *fsm) stop(index uint64, err error) error {
	h := &applyHalt{index: index, err: err}
	if f.halt.CompareAndSwap(nil, h) {
		f.log.Error("stopped applying the log: this node cannot apply an entry the other replicas apply, "+
			"so it serves this group no more; run a sluice release that can apply it (see CHANGELOG.md) and restart",
			"group", f.group, "index", index, "err", err, "supported_cluster_version", SupportedVersion)
		if f.onHalt != nil {
			f.onHalt()
		}
	}
	return f.haltError()
}

// haltError is the error of the FSM's halt, for callers.
func (f *fsm) haltError() error {
	h := f.halt.Load()
	return &errcode.Error{Code: errcode.ApplyHalted, Detail: "group " + strconv.Itoa(f.group) + ", " + h.String()}
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM. The response of an ops entry is
// its []engine.Result, which Raft hands to the leader's ApplyFuture; a
// malformed entry (every replica sees the same bytes, so every replica
// refuses it alike) responds with an error.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.hook != nil {
		f.hook()
	}
	start := time.Now()
	resp := make([]any, len(logs))
	for i, l := range logs {
		if f.halt.Load() != nil {
			// Halted: nothing after the entry that stopped it applies
			// either, in order, as Raft hands them (never a skip).
			if l.Type == raft.LogCommand {
				resp[i] = f.haltError()
			}
			continue
		}
		if l.Type == raft.LogCommand {
			resp[i] = f.applyCommand(l)
		}
		if f.halt.Load() == nil {
			f.applied.Store(l.Index)
		}
	}
	if f.metrics != nil {
		f.metrics.apply.Observe(time.Since(start).Seconds())
	}
	return resp
}

func (f *fsm) applyCommand(l *raft.Log) any {
	e, err := codec.DecodeEntryInto(l.Data, f.ops, f.spans)
	if err != nil {
		if e.Ignorable {
			// Marked safe to ignore by the release that wrote it.
			f.log.Warn("skipping a log entry marked ignorable that this build cannot apply", "group", f.group, "index", l.Index, "err", err)
			return nil
		}
		return f.stop(l.Index, err)
	}
	switch e.Type {
	case codec.EntryOps, codec.EntryBatch:
		if code, ok := f.needs.knows(e.Ops); !ok {
			clear(e.Ops)
			return f.stop(l.Index, fmt.Errorf("operation code %d is unknown to this build (cluster version %d at most)", code, SupportedVersion))
		}
		if cap(e.Ops) > cap(f.ops) && cap(e.Ops) <= maxScratch {
			f.ops = e.Ops[:0]
		}
		if cap(e.Spans) > cap(f.spans) && cap(e.Spans) <= maxScratch {
			f.spans = e.Spans[:0]
		}
		defer clear(e.Ops) // drop the references into the entry's data
		awaited, id := f.isAwaited(l.Data)
		var results []engine.Result
		if awaited {
			results = make([]engine.Result, len(e.Ops))
		} else {
			results = f.results
			if cap(results) < len(e.Ops) {
				results = make([]engine.Result, len(e.Ops))
				if len(e.Ops) <= maxScratch {
					f.results = results
				}
			}
			results = results[:len(e.Ops)]
		}
		if e.Type == codec.EntryBatch {
			f.applyBatch(e, results)
		} else {
			f.eng.Apply(e.Stamp, e.Ops, results)
		}
		if awaited {
			f.awaitMu.Lock()
			f.outcomes[l.Index] = entryOutcome{id: id, results: results}
			f.awaitMu.Unlock()
			return results
		}
		return nil
	case codec.EntryLeader:
		f.mu.Lock()
		f.leaders[e.Leader.ID] = e.Leader
		f.mu.Unlock()
	case codec.EntryVersion:
		return f.raiseVersion(l.Index, e.Version)
	}
	return nil
}

// raiseVersion applies a version entry (or a snapshot's version): the
// cluster version becomes v, unless it is higher already (versions never
// go down), or v is above what this build supports: then the FSM halts,
// since the log may from here on hold what this build cannot apply.
func (f *fsm) raiseVersion(index uint64, v uint32) error {
	if v > SupportedVersion {
		return f.stop(index, fmt.Errorf("the log raises the cluster version to %d, and this build supports %d at most (%s or later is needed)",
			v, SupportedVersion, releaseOf(v)))
	}
	if v <= f.version.Load() {
		return nil
	}
	// The data dir first: from the moment the version is visible, the
	// gate lets through what an older binary could not apply.
	if f.onVersion != nil {
		f.onVersion(v)
	}
	f.version.Store(v)
	f.log.Info("cluster version raised", "group", f.group, "index", index, "cluster_version", v)
	return nil
}

// applyBatch applies a batch entry's ops at one instant, but for the
// forwarded requests whose batch ID was applied already: their ops are
// skipped, and their results are the first copy's from the reply cache,
// or errDuplicateBatch when this replica has none (dedup.go). The results
// of the requests it applies are kept in the cache.
func (f *fsm) applyBatch(e codec.Entry, results []engine.Result) {
	var dups []codec.Span
	for _, sp := range e.Spans {
		if sp.ID != (codec.BatchID{}) && !f.dedup.admit(sp.ID, e.Stamp) {
			dups = append(dups, sp)
		}
	}
	if len(dups) == 0 {
		f.eng.Apply(e.Stamp, e.Ops, results)
	} else {
		// Rare (a re-sent batch): apply the others, then scatter their results.
		skip := make([]bool, len(e.Ops))
		for _, sp := range dups {
			for i := sp.Off; i < sp.Off+sp.N; i++ {
				skip[i] = true
			}
		}
		ops := make([]engine.Op, 0, len(e.Ops))
		for i := range e.Ops {
			if !skip[i] {
				ops = append(ops, e.Ops[i])
			}
		}
		sub := make([]engine.Result, len(ops))
		if len(ops) > 0 {
			f.eng.Apply(e.Stamp, ops, sub)
		}
		j := 0
		for i := range results {
			if !skip[i] {
				results[i] = sub[j]
				j++
			}
		}
	}
	f.keepReplies(e, dups, results)
	for _, sp := range dups {
		if f.replies.get(sp.ID, e.Ops[sp.Off:sp.Off+sp.N], results[sp.Off:sp.Off+sp.N]) {
			f.metrics.resent(true)
			continue
		}
		f.metrics.resent(false)
		for i := sp.Off; i < sp.Off+sp.N; i++ {
			results[i] = engine.Result{Err: errDuplicateBatch}
		}
	}
}

// keepReplies encodes the results of the entry's forwarded requests that
// applied (not dups) into the reply cache: one allocation for the entry.
func (f *fsm) keepReplies(e codec.Entry, dups []codec.Span, results []engine.Result) {
	c := f.replies
	type kept struct {
		id       codec.BatchID
		from, to int
	}
	var spans [16]kept
	ks := spans[:0]
	b := c.scratch[:0]
spans:
	for _, sp := range e.Spans {
		if sp.ID == (codec.BatchID{}) {
			continue
		}
		for _, d := range dups {
			if d.Off == sp.Off {
				continue spans
			}
		}
		from := len(b)
		b = codec.AppendResults(b, e.Ops[sp.Off:sp.Off+sp.N], results[sp.Off:sp.Off+sp.N])
		ks = append(ks, kept{sp.ID, from, len(b)})
	}
	if len(ks) == 0 {
		return
	}
	own := make([]byte, len(b))
	copy(own, b)
	if cap(b) <= maxScratch*64 {
		c.scratch = b[:0]
	}
	for _, k := range ks {
		c.keep(k.id, e.Stamp, own[k.from:k.to:k.to])
	}
}

// entryID identifies a log entry by its bytes, for the awaited set.
func entryID(data []byte) uint64 { return xxhash.Sum64(data) }

// await registers an entry (by entryID) as awaited by a caller on this
// node, before it is handed to Raft; forget removes the registration once
// the caller is answered or gone.
func (f *fsm) await(id uint64) {
	f.awaitMu.Lock()
	f.awaited[id]++
	f.awaitMu.Unlock()
}

// forget takes the entry's log index (0 if unknown), whose outcome it
// drops too.
func (f *fsm) forget(id, index uint64) {
	f.awaitMu.Lock()
	if f.awaited[id]--; f.awaited[id] <= 0 {
		delete(f.awaited, id)
	}
	if o, ok := f.outcomes[index]; ok && o.id == id {
		delete(f.outcomes, index)
	}
	if len(f.awaited) == 0 && len(f.outcomes) > 0 {
		clear(f.outcomes) // an outcome nobody will claim (a hash twin's)
	}
	f.awaitMu.Unlock()
}

// isAwaited says whether a caller on this node waits for the entry data,
// and the entry's ID when it does. A follower awaits nothing, and does not
// hash its entries.
func (f *fsm) isAwaited(data []byte) (bool, uint64) {
	f.awaitMu.Lock()
	none := len(f.awaited) == 0
	f.awaitMu.Unlock()
	if none {
		return false, 0
	}
	id := entryID(data)
	f.awaitMu.Lock()
	n := f.awaited[id]
	f.awaitMu.Unlock()
	return n > 0, id
}

// Outcome states of an awaited entry whose leader lost its leadership.
const (
	outcomePending    = iota // the log has not applied its index here yet
	outcomeApplied           // it committed: results are what it decided
	outcomeNotApplied        // another entry (or none) holds its index
	outcomeUnknown           // a snapshot restore passed over its index
)

// outcome says what became of the awaited entry id that Raft appended at
// index, once this node's log applied that index; restores is what
// f.restores was when the entry was appended.
func (f *fsm) outcome(id, index, restores uint64) (int, []engine.Result) {
	// applied first: the FSM stores an outcome before it moves applied,
	// so an outcome stored at an applied index is visible below.
	applied := f.applied.Load()
	if applied < index {
		return outcomePending, nil
	}
	f.awaitMu.Lock()
	o, ok := f.outcomes[index]
	f.awaitMu.Unlock()
	switch {
	case ok && o.id == id:
		return outcomeApplied, o.results
	case f.restores.Load() != restores:
		return outcomeUnknown, nil
	}
	return outcomeNotApplied, nil
}

// knowsLeaders reports whether the log has announced any member's
// addresses: a leader of the group was ready once (becomeReady).
func (f *fsm) knowsLeaders() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.leaders) > 0
}

// leader returns what the log says about id's addresses.
func (f *fsm) leader(id string) (codec.Leader, bool) {
	f.mu.RLock()
	e, ok := f.leaders[id]
	f.mu.RUnlock()
	return e, ok
}
