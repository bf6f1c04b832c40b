package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/engine"
)

// The group commit pipeline.
//
// Invariants. Every decision is computed by the FSM when its log entry
// applies, so every replica computes the same one; a caller is answered only
// after its entry has committed on a majority and applied here; the ops of
// one Execute call (one client pipeline) stay together, in order, in one
// entry, applied at one instant; and every entry carries the time at which
// the leader built it, which the engine clamps so that time never goes
// backwards (a new leader's clock may be behind the old one's).
//
// The naive design, one Raft entry per command, applied one at a time, is
// bounded by the leader's serial fsync: the bolt commit costs ~0.7 ms, so a
// few thousand decisions per second, whatever the number of clients
// (measured on three voters with fsync on: 13k entries/s even with 64
// applies in flight). Throughput needs two things at once: many ops per
// entry, and several entries in flight.
//
// The design. Callers (connection goroutines, and the forward server on
// behalf of followers) put a request on one channel and block. One batcher
// goroutine owns everything after that:
//
//  1. It takes every queued request that fits into the entry it is
//     gathering: whole requests only, up to MaxBatchOps and MaxBatchBytes (a
//     request that does not fit opens the next entry).
//  2. It hands the entry to Raft at once when nothing is in flight: an idle
//     pipeline adds no latency (the one exception: just after an entry was
//     answered, the next waits briefly for its callers; see backlog). Otherwise
//     it keeps gathering while the earlier entries commit, and hands the
//     entry over only once it is full or holds a quarter of MaxBatchOps (the
//     fill), and fewer than MaxInflight entries are in flight. The busier
//     the pipeline, the larger the entries; several large entries commit
//     at once, one on the leader's disk while the previous is on the
//     followers'.
//  3. raft.Apply takes the entry, stamped with the leader's wall clock at
//     that moment and encoded then (a caller that gave up before that point
//     is left out: certainly not applied). Raft appends queued entries in
//     groups (BatchApplyCh, MaxAppendEntries) and replicates them in one
//     AppendEntries each.
//  4. A waiter per entry awaits its future. On success the future's
//     Response is the []engine.Result the FSM computed; the waiter hands
//     each request its slice of it, wakes the caller, and tells the batcher
//     a slot is free. Entries commit and apply in log order, so callers are
//     answered in the order their requests were queued.
//
// Why hold entries back instead of keeping many small ones in flight? Every
// entry costs a bolt commit (two fdatasyncs, ~140 µs of CPU here) on every
// node, so ops per entry is what CPU per op depends on. On a 2-core VM with
// three nodes on one disk and 50 callers of 16 ops (BenchmarkCluster*),
// eager submission with 8 in flight made entries of ~70 ops at ~10 CPU-µs
// per op; 2 in flight, ~220 ops and ~7 µs; the fill rule, ~220-280 ops, 4-9
// µs, and up to 200k ops/s when the machine was quiet (one node: 490k).
// With few callers (50 of one op each), it runs about one entry at a time
// of ~25 ops and matched or beat eager submission, at half its CPU per op.
//
// Deadlines. A Raft future can wait forever when quorum is lost (raft#498),
// so nothing here trusts one: each caller waits on its own timer
// (ClusterTimeout), and each waiter gives up on its future after the same
// time plus a margin, freeing its slot. A request that times out before the
// batcher took it is certainly not applied: CLUSTERDOWN, which clients such
// as go-redis retry. One that times out after is in an entry Raft may yet
// commit: UNCERTAIN, which they do not retry, since a retry could charge
// twice. The request's outcome (cluster/outcome, shared with forwarded calls)
// decides, with one compare-and-swap on its state word, whether the caller
// gave up first (the late result is dropped) or the waiter claimed it (the
// caller takes the result), and outcome.GiveUpError which of the two errors fits;
// so the results slice is never written after the caller returned; and
// while the batcher reads a request's ops, the caller waits before it
// gives up, so the ops' memory is never read after the caller returned
// either.
//
// The waiter list is the entry's slice of requests, not a list keyed by
// ID (etcd's pkg/wait, which the follower's connections follow: cluster/forward's
// pending): an entry's requests are answered together, in order, each
// with its run of the entry's results, so a slice walked once needs no
// lock, no map and no ID per request on the leader's hot path.
//
// Forwarded requests carry their follower's batch ID: an entry holding one
// is a batch entry (cluster/codec), and the FSM applies each ID at most once
// (dedup.go), so a follower may re-send a batch whose connection broke.
//
// Failures. ErrNotLeader, a leadership transfer in progress or an enqueue
// timeout mean Raft refused the entry before appending it: not applied
// (outcome.TryNotApplied), so Execute routes the request again (to the new leader,
// through forwarding). ErrLeadershipLost after the entry was appended says
// nothing of its fate: the waiter learns it from this node's own log
// (resolve, fsm.outcome): the entry's results when it committed, a retry
// when another entry took its index; outcome.TryUnknown (UNCERTAIN for the client)
// only when the log told nothing in time, or on shutdown. Never a retry
// that could apply it twice.
//
// Locks: none. The batcher goroutine owns its buffers; requests cross
// goroutines through channels and their state word; the engine is touched
// only by the FSM goroutine, never while raft.Apply is being called.

// request is one Execute call's batch on its way through the pipeline:
// its ops and the outcome its caller waits for (cluster/outcome).
//
// Requests are recycled (batcher.reqPool): a request goes back to the pool
// only from wait, once its caller received the outcome on done, which
// finish sends as the last thing any other goroutine does with it. A
// request its caller abandoned is never recycled, since a waiter may still
// try to claim it.
type request struct {
	outcome.Outcome
	b    *batcher      // whose wait the Pending's Wait is
	id   codec.BatchID // a forwarded batch's ID, or zero
	ops  []engine.Op
	size int // encoded size estimate
}

// batcher is the group commit pipeline's single gathering goroutine.
type batcher struct {
	raft        *raft.Raft
	fsm         *fsm
	now         func() int64
	timeout     time.Duration
	maxOps      int
	maxBytes    int
	reqs        chan *request
	fill        int            // ops that justify a second entry in flight
	maxInflight int            // MaxInflight
	freed       chan entryDone // an entry was answered; capacity MaxInflight
	reqPool     sync.Pool      // of *request: see request
	closing     <-chan struct{}
	stopped     chan struct{}
	metrics     *nodeMetrics // commit and hold times; nil: none

	entries atomic.Uint64 // entries committed
	ops     atomic.Uint64 // ops in those entries

	// storeFault returns the MISCONF error while this node's log store
	// cannot be written (cluster/logstore/faultstore.go); nil when in
	// memory.
	storeFault func() error
	// awaiting counts the entries handed to Raft whose callers are not
	// answered yet (Handover waits for none).
	awaiting atomic.Int64
}

func newBatcher(r *raft.Raft, f *fsm, cfg *Config, m *nodeMetrics, closing <-chan struct{}) *batcher {
	return &batcher{
		raft:        r,
		fsm:         f,
		now:         cfg.Now,
		timeout:     cfg.ClusterTimeout,
		maxOps:      cfg.MaxBatchOps,
		maxBytes:    cfg.MaxBatchBytes,
		reqs:        make(chan *request, 4*cfg.MaxBatchOps),
		fill:        cfg.BatchFill,
		maxInflight: cfg.MaxInflight,
		freed:       make(chan entryDone, cfg.MaxInflight),
		closing:     closing,
		stopped:     make(chan struct{}),
		metrics:     m,
	}
}

// Submit is the group commit's try of a batch (forward.Submitter): it
// queues b's ops and waits for their results, until the deadline timer
// fires or ctx ends: outcome.TryNotApplied when the batch was certainly
// not applied and may be routed again, outcome.TryUnknown when it may
// have applied and the log told nothing in time. A batch with an ID (zero
// for none) is applied at most once by the FSM.
func (b *batcher) Submit(ctx context.Context, deadline <-chan time.Time, bt forward.Batch) outcome.Attempt {
	req, err := b.enqueue(ctx, deadline, bt.ID, bt.Ops, bt.Results)
	if err != nil {
		return outcome.Done(err)
	}
	return b.wait(ctx, deadline, req)
}

// Wait waits for a queued request's outcome (forward.Pending: a batch a
// follower forwarded, queued by Node's fwdGroup.Accept).
func (r *request) Wait(ctx context.Context, deadline <-chan time.Time) outcome.Attempt {
	return r.b.wait(ctx, deadline, r)
}

// enqueue puts ops on the batcher's queue. Requests queued by one goroutine
// are committed in that order.
func (b *batcher) enqueue(ctx context.Context, deadline <-chan time.Time, id codec.BatchID, ops []engine.Op, results []engine.Result) (*request, error) {
	req, _ := b.reqPool.Get().(*request)
	if req == nil {
		req = &request{b: b}
	}
	req.id, req.ops, req.size = id, ops, codec.OpsSize(ops)
	req.Reset(results)
	select {
	case b.reqs <- req:
		return req, nil
	case <-deadline:
	case <-ctx.Done():
		b.release(req)
		return nil, fmt.Errorf("cluster: execute: %w", ctx.Err())
	case <-b.closing:
		b.release(req)
		return nil, ErrShuttingDown
	}
	b.release(req) // never queued: nobody else saw it
	return nil, outcome.ClusterDownError(b.timeout)
}

// release recycles a request whose outcome its caller received (or that
// was never queued): no other goroutine refers to it any more.
func (b *batcher) release(req *request) {
	req.ops = nil
	req.Reset(nil)
	b.reqPool.Put(req)
}

// wait waits for a queued request's outcome.
func (b *batcher) wait(ctx context.Context, deadline <-chan time.Time, req *request) outcome.Attempt {
	var notApplied error
	var why outcome.StopCause
	closing := b.closing
	for notApplied == nil {
		select {
		case <-req.Delivered():
			a := req.Attempt()
			b.release(req)
			return a
		case <-deadline:
			why, notApplied = outcome.StopDeadline, outcome.ClusterDownError(b.timeout)
		case <-ctx.Done():
			why, notApplied = outcome.StopCanceled, fmt.Errorf("cluster: execute: %w", ctx.Err())
		case <-closing:
			// Still queued: the batcher is gone and will never take it.
			// Already in an entry: its outcome still comes from Raft.
			closing = nil
			if req.Abandon() {
				return outcome.Done(ErrShuttingDown)
			}
		}
	}
	switch st := req.GiveUp(); st {
	case outcome.Queued, outcome.HandedOver:
		return outcome.Done(outcome.GiveUpError(st == outcome.HandedOver, why, notApplied, b.timeout))
	}
	<-req.Delivered() // a waiter claimed it first and is writing the outcome
	a := req.Attempt()
	b.release(req)
	return a
}

// finish hands a request its outcome, unless its caller gave up.
func finish(req *request, results []engine.Result, a outcome.Attempt) {
	if !req.Claim(outcome.HandedOver) && !req.Claim(outcome.Queued) {
		return
	}
	if a.Kind == outcome.TryDone && a.Err == nil {
		copy(req.Results(), results)
	}
	req.Deliver(a) // the last touch: the caller may recycle req now
}

// run is the batcher goroutine.
func (b *batcher) run() {
	defer close(b.stopped)
	var (
		pending      []*request // gathered for the next entry, still outQueued
		nops, nbytes int
		over         *request  // did not fit in pending: opens the entry after
		firstAt      time.Time // when pending's first request joined it
		inflight     int       // entries handed to Raft and not yet answered
		body         []byte    // scratch for encoding
		back         backlog   // the callers of the last answered entry coming back
		returns      = returnCap{came: -1}
		holdTimer    = time.NewTimer(time.Hour)
	)
	holdTimer.Stop()
	defer holdTimer.Stop()
	add := func(r *request) {
		back.arrived++
		if len(pending) > 0 && (nops+len(r.ops) > b.maxOps || nbytes+r.size > b.maxBytes) {
			over = r
			return
		}
		if len(pending) == 0 {
			firstAt = time.Now()
		}
		pending = append(pending, r)
		nops += len(r.ops)
		nbytes += r.size
	}
	full := func() bool { return over != nil || nops >= b.maxOps || nbytes >= b.maxBytes }
	for {
		// Take whatever is queued, as long as it fits.
	gather:
		for !full() {
			select {
			case r := <-b.reqs:
				add(r)
			default:
				break gather
			}
		}
		var holdC <-chan time.Time
		if len(pending) > 0 && b.submitNow(nops, full(), inflight) {
			if inflight == 0 && !full() {
				if wait := back.hold(time.Now()); wait > 0 {
					// The callers just answered are coming back: let
					// them join this entry (see backlog).
					holdTimer.Reset(wait)
					holdC = holdTimer.C
					goto wait
				}
			}
			if b.apply(pending, &body, firstAt) {
				inflight++
			}
			clear(pending)
			pending, nops, nbytes = pending[:0], 0, 0
			if r := over; r != nil {
				over = nil
				add(r)
			}
			continue
		}
	wait:
		// Wait for more requests (unless the entry is full), or for an
		// entry to be answered.
		reqs := b.reqs
		if full() {
			reqs = nil
		}
		select {
		case r := <-reqs:
			add(r)
		case <-holdC:
			// The rest are not coming soon: expect no more than came back
			// this time, until a probe finds more.
			returns.ranOut(back.arrived)
			back = backlog{}
		case d := <-b.freed:
			inflight--
			back = backlog{expect: returns.expect(d.callers), since: time.Now(), commit: d.took}
		case <-b.closing:
			for _, r := range pending {
				finish(r, nil, outcome.Done(ErrShuttingDown))
			}
			if over != nil {
				finish(over, nil, outcome.Done(ErrShuttingDown))
			}
			b.drain()
			return
		}
	}
}

// entryDone tells the batcher that an entry was answered: how many
// callers it answered, and how long it took from raft.Apply.
type entryDone struct {
	callers int
	took    time.Duration
}

// backlog follows the callers of the last answered entry as they come
// back, so that an entry about to go out alone waits for them a little.
//
// Clients of one command at a time (P1) would otherwise split into two
// halves that alternate: when an entry is answered, the entry gathered
// meanwhile goes out at once (nothing is in flight), before the callers
// just answered have had a round trip to send their next commands; those
// then gather behind it and wait for its whole commit before their own.
// Each request so waits about two commits, and each entry carries half the
// clients. Waiting a little, after an entry is answered, makes one entry
// of all the clients per commit and a round trip: about twice the ops per
// entry at P1, and a request waits about one commit and a round trip
// instead of two commits. The wait lasts until as many
// requests arrived as the entry answered (they are its callers coming back,
// or as many others), for at most twice its commit time and maxBackHold:
// a client's round trip (reply, its next command, our read) took about one
// commit time on a busy 2-core machine. Callers that do not come back (a
// client that went idle) cost one wait: the entries after it expect only
// as many as came back, and every backProbeEvery-th entry expects them all
// again. With nothing in flight and no answer pending, a request goes out
// at once, as before.
type backlog struct {
	expect  int           // callers the last answered entry had
	arrived int           // requests gathered since it was answered
	since   time.Time     // when it was answered
	commit  time.Duration // how long its commit took
}

// returnCap remembers how many callers came back when a wait ran out,
// and caps what the next entries expect by it.
type returnCap struct {
	came  int // callers that came back before the last wait ran out; -1: no cap
	probe int // entries since the cap was last ignored
}

// expect returns how many of an answered entry's callers to wait for.
func (rc *returnCap) expect(callers int) int {
	if rc.probe++; rc.came >= 0 && rc.probe < backProbeEvery {
		return min(callers, rc.came)
	}
	rc.came, rc.probe = -1, 0
	return callers
}

// ranOut records that a wait ran out after arrived requests.
func (rc *returnCap) ranOut(arrived int) { rc.came = arrived }

const (
	// maxBackHold bounds how long an entry waits for the callers of the
	// last one.
	maxBackHold = 3 * time.Millisecond
	// backProbeEvery: after a wait ran out with some callers missing, the
	// next entries expect only as many as came back, and every this many
	// entries one expects them all again.
	backProbeEvery = 64
)

// hold returns how much longer an entry with nothing in flight should wait
// for callers coming back, or 0 to go now.
func (bl *backlog) hold(now time.Time) time.Duration {
	if bl.arrived >= bl.expect {
		return 0
	}
	left := min(2*bl.commit, maxBackHold) - now.Sub(bl.since)
	return max(left, 0)
}

// submitNow reports whether the entry being gathered, of nops ops (full
// when it can take no more), goes to Raft now, with inflight entries in
// flight: if a slot is free, and nothing is in flight (an idle pipeline
// adds no latency) or the entry is worth a slot of its own (full, or
// holding the fill).
//
// Not done: letting a second entry go early at low concurrency. Tried with
// "as large as the one in flight": the clients of the entry in flight wait
// for it, so the second can only gather the others, and the two settled
// into one large entry and one of a few ops, no faster (P1: 12k/s either way).
//
// Why this serves clients of one command each (P1: 50 connections of one
// RL.TOKEN, the fill of 256 out of reach): an entry gathered while another
// is in flight never waits for the fill, only for that entry to be
// answered, since inflight == 0 sends at once. That is at most one commit,
// which the callers of the gathered entry would wait anyway: their
// decisions apply after the entry in flight. Left at that, the clients
// settle into two groups of ~25 that alternate, one committing while the
// other gathers (BenchmarkClusterThreeNodesP1 reported 25 ops per entry);
// backlog below lets the entry wait for the callers just answered, which
// makes one group (~48 ops per entry). Sending early
// instead (BatchFill 1, so up to MaxInflight small entries) was slower
// with both log stores, as each entry costs a commit on every node (two
// runs each, -benchtime 20000x, shared 2-core machine, only indicative):
// bolt 12-21k ops/s at this rule against 12-16k eager, p50 2.2-3.7 ms
// against 3.1-3.7 ms; wal 34-37k against 21k, p50 1.3 ms against 1.7-2.2.
func (b *batcher) submitNow(nops int, full bool, inflight int) bool {
	if nops == 0 || inflight >= b.maxInflight {
		return false
	}
	return inflight == 0 || full || nops >= b.fill
}

// apply encodes the requests whose callers still wait into one entry,
// stamped with the leader's clock, and hands it to Raft; firstAt is when
// the entry's first request was gathered (for the hold-time metric). It
// reports whether an entry was handed over (its waiter will signal freed).
func (b *batcher) apply(pending []*request, body *[]byte, firstAt time.Time) bool {
	batch := make([]*request, 0, len(pending))
	*body = (*body)[:0]
	n := 0
	// A batch entry only when a forwarded request needs its ID logged.
	withIDs := false
	for _, r := range pending {
		withIDs = withIDs || r.id != (codec.BatchID{})
	}
	for _, r := range pending {
		// The caller may give up at any moment and reuse its ops' memory:
		// encode them under outEncoding, which the caller waits out.
		if !r.StartEncoding() {
			continue // abandoned before it reached the log: not applied
		}
		if withIDs {
			*body = codec.AppendBatchRequest(*body, r.id, len(r.ops))
		}
		for i := range r.ops {
			*body = codec.AppendOp(*body, &r.ops[i])
		}
		r.Encoded()
		batch = append(batch, r)
		n += len(r.ops)
	}
	if len(batch) == 0 {
		return false
	}
	buf := make([]byte, 0, 3*binary.MaxVarintLen64+1+len(*body))
	if withIDs {
		buf = codec.AppendBatchEntryHeader(buf, b.now(), n, len(batch))
	} else {
		buf = codec.AppendOpsEntryHeader(buf, b.now(), n)
	}
	buf = append(buf, *body...)
	id := entryID(buf)
	b.fsm.await(id)
	restores := b.fsm.restores.Load()
	start := time.Now()
	b.metrics.held(start.Sub(firstAt))
	b.awaiting.Add(1)
	f := b.raft.Apply(buf, b.timeout)
	go b.await(f, entryRef{id: id, restores: restores}, batch, n, start)
	return true
}

// entryRef names an entry handed to Raft, for its waiter: its entryID,
// and the FSM's restore count when it was handed over (fsm.outcome).
type entryRef struct {
	id       uint64
	restores uint64
}

// drain fails every queued request when the node closes.
func (b *batcher) drain() {
	for {
		select {
		case r := <-b.reqs:
			finish(r, nil, outcome.Done(ErrShuttingDown))
		default:
			return
		}
	}
}
