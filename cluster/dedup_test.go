package cluster

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/persistence"
)

// batchEntry encodes a batch entry of the given requests.
func batchEntry(stamp int64, ids []codec.BatchID, reqs [][]engine.Op) []byte {
	n := 0
	for _, r := range reqs {
		n += len(r)
	}
	b := codec.AppendBatchEntryHeader(nil, stamp, n, len(reqs))
	for i, r := range reqs {
		b = codec.AppendBatchRequest(b, ids[i], len(r))
		for j := range r {
			b = codec.AppendOp(b, &r[j])
		}
	}
	return b
}

func testID(n byte) codec.BatchID { return codec.BatchID{15: n, 0: 0xab} }

// TestOldEntryStillApplies: an ops entry as the previous version wrote it
// (codec/testdata/entry_v1.hex; codec's TestOldEntryDecodes checks its
// ops) decodes and applies, as a node upgraded in place replays its log.
func TestOldEntryStillApplies(t *testing.T) {
	raw, err := os.ReadFile("codec/testdata/entry_v1.hex")
	if err != nil {
		t.Fatal(err)
	}
	data, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{Stripes: 4})
	f := newFSM(eng, testLogger(t), nil)
	if r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}); r != nil {
		t.Fatalf("apply: %v", r)
	}
	res := make([]engine.Result, 1)
	eng.Apply(1_700_000_000_000_000_000, []engine.Op{{Code: engine.OpPeek, Key: []byte("old")}}, res)
	if res[0].Remaining != tokenRule.Limit-3 {
		t.Fatalf("remaining %d after the old entry, want %d", res[0].Remaining, tokenRule.Limit-3)
	}
}

func TestDedupSet(t *testing.T) {
	s := newDedupSet()
	t0 := int64(1e18)
	if !s.admit(testID(1), t0) || s.admit(testID(1), t0+1) {
		t.Fatal("an ID must be admitted once")
	}
	// Log time that goes back does not expire anything early.
	if s.admit(testID(1), t0-int64(time.Hour)) {
		t.Fatal("admitted again with an older stamp")
	}
	// Forgotten once the log time is a window past it.
	if s.admit(testID(1), t0+int64(dedupWindow)-1) {
		t.Fatal("forgotten before the window passed")
	}
	if !s.admit(testID(2), t0+int64(dedupWindow)+1) || s.len() != 1 {
		t.Fatalf("not forgotten after the window: %d remembered", s.len())
	}
	if !s.admit(testID(1), t0+int64(dedupWindow)+1) {
		t.Fatal("an expired ID must be admitted again")
	}

	// Bounded in count: the oldest go first.
	s = newDedupSet()
	var id codec.BatchID
	for i := range dedupMax + 10 {
		id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
		s.admit(id, t0)
	}
	if s.len() != dedupMax || len(s.seen) != dedupMax {
		t.Fatalf("%d remembered (%d in the map), want %d", s.len(), len(s.seen), dedupMax)
	}
	if !s.admit(codec.BatchID{}, t0) { // ID 0 (i = 0) was evicted first
		t.Fatal("the oldest ID was not evicted")
	}
	if s.admit(id, t0) {
		t.Fatal("the newest ID was evicted")
	}

	// Snapshot meta round trip, the log time included.
	s = newDedupSet()
	for i := range 3000 { // more than one meta pair
		id := codec.BatchID{0: byte(i), 1: byte(i >> 8)}
		s.admit(id, t0+int64(i))
	}
	meta := s.meta()
	for _, kv := range meta {
		if len(kv[1]) > persistence.MaxMetaLen || len(meta) > 10 {
			t.Fatalf("meta %q of %d bytes in %d pairs", kv[0], len(kv[1]), len(meta))
		}
	}
	back, err := restoreDedup(append([][2]string{{"applied", "9"}}, meta...))
	if err != nil {
		t.Fatal(err)
	}
	if back.now != s.now || !reflect.DeepEqual(back.order[back.head:], s.order[s.head:]) || len(back.seen) != 3000 {
		t.Fatalf("restored %d records, now %d; want %d, %d", back.len(), back.now, s.len(), s.now)
	}
	if _, err := restoreDedup([][2]string{{dedupMetaPfx + "0", "short"}}); err == nil {
		t.Fatal("a malformed record restored")
	}
}

// TestFSMAppliesBatchOnce: a batch ID applies once, in the same entry, in a
// later one, and after a snapshot is restored on another replica; a
// re-send is answered with the first copy's results where the replica
// applied it (the reply cache), else errDuplicateBatch.
func TestFSMAppliesBatchOnce(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4})
	f := newFSM(eng, testLogger(t), nil)
	stamp := int64(1e18)
	a := []engine.Op{decide("a", tokenRule, 1)}
	b := []engine.Op{decide("b", tokenRule, 2)}
	// One entry: a local request, a forwarded one, and a re-send of it.
	data := batchEntry(stamp, []codec.BatchID{{}, testID(1), testID(1)}, [][]engine.Op{b, a, a})
	f.await(entryID(data))
	rs, ok := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).([]engine.Result)
	f.forget(entryID(data), 0)
	if !ok || len(rs) != 3 || !rs[0].Allowed || !rs[1].Allowed || !reflect.DeepEqual(rs[2], rs[1]) {
		t.Fatalf("results %+v", rs)
	}
	// A later entry with the same ID: skipped, answered from the cache.
	data = batchEntry(stamp+1, []codec.BatchID{testID(1)}, [][]engine.Op{a})
	f.await(entryID(data))
	again, _ := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: data}).([]engine.Result)
	f.forget(entryID(data), 0)
	if len(again) != 1 || !reflect.DeepEqual(again[0], rs[1]) {
		t.Fatalf("re-send: %+v, want the first copy's %+v", again, rs[1])
	}
	if f.replies.batches.Load() != 1 || f.replies.bytes.Load() <= replyOverhead {
		t.Fatalf("cache: %d batches, %d bytes", f.replies.batches.Load(), f.replies.bytes.Load())
	}
	peek := func(e *engine.Engine, key string) int64 {
		res := make([]engine.Result, 1)
		e.Apply(stamp+2, []engine.Op{{Code: engine.OpPeek, Key: []byte(key)}}, res)
		return res[0].Remaining
	}
	if got := peek(eng, "a"); got != tokenRule.Limit-1 {
		t.Fatalf("a: remaining %d, want %d: charged more than once", got, tokenRule.Limit-1)
	}
	if got := peek(eng, "b"); got != tokenRule.Limit-2 {
		t.Fatalf("b: remaining %d", got)
	}

	// The set travels in the snapshot.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	eng2 := engine.New(engine.Config{Stripes: 4})
	f2 := newFSM(eng2, testLogger(t), nil)
	if err := f2.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	data = batchEntry(stamp+2, []codec.BatchID{testID(1), testID(2)}, [][]engine.Op{a, a})
	f2.await(entryID(data))
	rs2, _ := f2.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: data}).([]engine.Result)
	f2.forget(entryID(data), 0)
	if got := peek(eng2, "a"); got != tokenRule.Limit-2 {
		t.Fatalf("restored replica: a remaining %d, want %d (ID 1 skipped, ID 2 applied)", got, tokenRule.Limit-2)
	}
	// The replica never applied ID 1 itself: no reply to give.
	if len(rs2) != 2 || rs2[0].Err != errDuplicateBatch || !rs2[1].Allowed {
		t.Fatalf("restored replica's results %+v", rs2)
	}
}

// TestReplyCacheBounds: replies are dropped replyWindow of log time after
// they applied, and the oldest first once they take replyMaxBytes.
func TestReplyCacheBounds(t *testing.T) {
	c := newReplyCache()
	t0 := int64(1e18)
	enc := func(rs ...engine.Result) []byte { return codec.AppendResults(nil, make([]engine.Op, len(rs)), rs) }
	got := make([]engine.Result, 1)
	c.keep(testID(1), t0, enc(engine.Result{Allowed: true}))
	c.keep(testID(2), t0+int64(replyWindow)/2, enc(engine.Result{Allowed: true}))
	if !c.get(testID(1), make([]engine.Op, len(got)), got) || !got[0].Allowed || c.batches.Load() != 2 {
		t.Fatal("a fresh reply is not kept")
	}
	if c.get(testID(1), make([]engine.Op, 2), make([]engine.Result, 2)) {
		t.Fatal("a reply decoded into results of another length")
	}
	c.keep(testID(3), t0+int64(replyWindow)+1, enc(engine.Result{Remaining: 7, Err: engine.ErrWrongType}))
	if c.get(testID(1), make([]engine.Op, len(got)), got) {
		t.Fatal("a reply older than the window is kept")
	}
	if !c.get(testID(3), make([]engine.Op, len(got)), got) || got[0].Remaining != 7 || got[0].Err != engine.ErrWrongType || c.batches.Load() != 2 {
		t.Fatalf("after expiry: %+v, %d batches", got[0], c.batches.Load())
	}
	big := enc(engine.Result{Value: make([]byte, replyMaxBytes/2)})
	for i := range 4 {
		c.keep(testID(byte(10+i)), t0+int64(replyWindow)+2, big)
	}
	if c.bytes.Load() > replyMaxBytes || c.batches.Load() != 1 {
		t.Fatalf("over the memory bound: %d batches, %d bytes", c.batches.Load(), c.bytes.Load())
	}
	if !c.get(testID(13), make([]engine.Op, len(got)), got) {
		t.Fatal("the newest reply was dropped")
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// breakOnReply closes its connection when the first reply arrives,
// instead of delivering it: the leader has applied the request, and the
// follower sees its connection break after it wrote it.
type breakOnReply struct {
	net.Conn
	broke *atomic.Bool
}

func (c breakOnReply) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.broke.CompareAndSwap(false, true) {
		c.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestResentBatchChargesOnce: a follower's forwarded batch whose
// connection breaks after it was written (and applied) is sent again on a
// new connection with the same ID; the FSM skips it, the reply is the
// first copy's (the leader's reply cache), and the key is charged once on
// every replica.
func TestResentBatchChargesOnce(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	leader := tc.leader()
	f := (leader + 1) % 3
	var broke atomic.Bool
	var dials atomic.Int32
	// Drop the pooled connections: the next call dials.
	tc.nodes[f].fwd.WrapConns(func(c net.Conn) net.Conn {
		dials.Add(1)
		return breakOnReply{Conn: c, broke: &broke}
	})

	res := make([]engine.Result, 1)
	err := tc.nodes[f].Execute(context.Background(), []engine.Op{decide("once", tokenRule, 1)}, res)
	if !broke.Load() || dials.Load() < 2 {
		t.Fatalf("the connection did not break after the write (broke %v, %d dials)", broke.Load(), dials.Load())
	}
	if err != nil || !res[0].Allowed || res[0].Remaining != tokenRule.Limit-1 {
		t.Fatalf("re-sent batch: %+v, %v; want the first copy's reply (allowed, remaining %d)", res[0], err, tokenRule.Limit-1)
	}
	tc.waitConverged(leader)
	for i, e := range tc.engines {
		rs := make([]engine.Result, 1)
		e.Apply(tc.clock.now(), []engine.Op{{Code: engine.OpPeek, Key: []byte("once")}}, rs)
		if rs[0].Remaining != tokenRule.Limit-1 {
			t.Fatalf("node %d: remaining %d, want %d: the re-sent batch was charged %d times", i+1,
				rs[0].Remaining, tokenRule.Limit-1, tokenRule.Limit-rs[0].Remaining)
		}
	}
}

// TestBatcherTimeoutClass: a caller whose deadline passes while its
// request is still queued gets CLUSTERDOWN (not applied); once the request
// was handed to Raft, UNCERTAIN.
func TestBatcherTimeoutClass(t *testing.T) {
	for _, tt := range []struct {
		state int32
		want  error
	}{{outcome.Queued, ErrClusterDown}, {outcome.HandedOver, ErrUncertain}} {
		t.Run(fmt.Sprint(tt.state), func(t *testing.T) {
			b := &batcher{timeout: time.Second, closing: make(chan struct{})}
			req := &request{b: b}
			req.Reset(nil)
			if tt.state == outcome.HandedOver {
				req.HandOver()
			}
			deadline := make(chan time.Time, 1)
			deadline <- time.Now()
			err := b.wait(context.Background(), deadline, req).Reply()
			if !errors.Is(err, tt.want) || errors.Is(err, ErrClusterDown) == errors.Is(err, ErrUncertain) {
				t.Fatalf("err = %v, want %v's class only", err, tt.want)
			}
			if req.State() != outcome.Abandoned {
				t.Fatalf("state %d, want abandoned", req.State())
			}
		})
	}
}

// TestIsolatedLeaderNeverHidesACharge: commands sent to a leader cut off
// from both followers time out; those answered CLUSTERDOWN must not have
// applied once the partition heals, those handed to Raft answer UNCERTAIN.
func TestIsolatedLeaderNeverHidesACharge(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	old := tc.leader()
	tc.isolate(old)
	var down, uncertain int64
	for i := range 5 {
		err := tc.nodes[old].Execute(context.Background(), []engine.Op{decide("iso", tokenRule, 1)}, make([]engine.Result, 1))
		switch {
		case err == nil:
			t.Fatalf("the isolated leader decided command %d", i)
		case errors.Is(err, ErrUncertain):
			uncertain++
		case errors.Is(err, ErrClusterDown):
			down++
		default:
			t.Fatalf("command %d: %v", i, err)
		}
		if i == 0 && !errors.Is(err, ErrUncertain) {
			// The first went to Raft while this node still led.
			t.Fatalf("first command: %v, want UNCERTAIN", err)
		}
	}
	tc.heal(old)
	nl := tc.leader()
	tc.waitConverged(nl)
	p := exec(t, tc.nodes[nl], engine.Op{Code: engine.OpPeek, Key: []byte("iso")})[0]
	var consumed int64
	if p.Limit != 0 {
		consumed = p.Limit - p.Remaining
	}
	t.Logf("%d UNCERTAIN, %d CLUSTERDOWN; %d consumed after the heal", uncertain, down, consumed)
	if consumed > uncertain {
		t.Fatalf("%d units consumed, but only %d replies were UNCERTAIN: a CLUSTERDOWN reply hid a charge", consumed, uncertain)
	}
}

// TestFSMAwaitedByID: the FSM recognises an entry its node awaits by the
// entry's bytes, not by the slice it was submitted in (Raft may hand the
// FSM a copy read back from the log); identical entries are counted, and
// an entry nobody awaits gets no results of its own.
func TestFSMAwaitedByID(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4})
	f := newFSM(eng, testLogger(t), nil)
	data := batchEntry(int64(1e18), []codec.BatchID{{}}, [][]engine.Op{{decide("a", tokenRule, 1)}})
	apply := func(i uint64) []engine.Result {
		rs, _ := f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: bytes.Clone(data)}).([]engine.Result)
		return rs
	}
	if rs := apply(1); rs != nil {
		t.Fatalf("an entry nobody awaits got results: %+v", rs)
	}
	f.await(entryID(data))
	f.await(entryID(data)) // a second caller's identical entry
	if rs := apply(2); len(rs) != 1 || !rs[0].Allowed {
		t.Fatalf("awaited entry (a copy of its bytes): %+v", rs)
	}
	f.forget(entryID(data), 0)
	if rs := apply(3); len(rs) != 1 {
		t.Fatalf("the second identical entry lost its results: %+v", rs)
	}
	f.forget(entryID(data), 0)
	if rs := apply(4); rs != nil || len(f.awaited) != 0 {
		t.Fatalf("forgotten entry still awaited: %+v, %v", rs, f.awaited)
	}
}

// hookOnReply runs hook when the first reply arrives, then breaks the
// connection instead of delivering it.
type hookOnReply struct {
	net.Conn
	once *sync.Once
	hook func()
}

func (c hookOnReply) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		hit := false
		c.once.Do(func() { hit = true })
		if hit {
			c.hook()
			c.Conn.Close()
			return 0, io.ErrUnexpectedEOF
		}
	}
	return n, err
}

// TestResentBatchAnsweredByNewLeader: the leader applies a forwarded
// batch, the follower's connection breaks before the reply arrives, and
// the leadership moves to the follower itself before it sends the batch
// again: the new leader applied the first copy as a follower, so it
// answers the re-send with that copy's results, and the key is charged
// once.
func TestResentBatchAnsweredByNewLeader(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	leader := tc.leader()
	f := (leader + 1) % 3
	exec(t, tc.nodes[f], decide("moved", tokenRule, 2)) // a reply to tell from a fresh decision
	var once sync.Once
	tc.nodes[f].fwd.WrapConns(func(c net.Conn) net.Conn {
		return hookOnReply{Conn: c, once: &once, hook: func() {
			// On the forward client's reader goroutine: no t.Fatal here.
			// The follower has applied what the leader has (the entry
			// committed before the leader answered); move the leadership
			// to it from whichever node leads now.
			err := testkit.Poll(5*time.Second, 5*time.Millisecond, func() error {
				for i, n := range tc.nodes {
					if k := n.route().kind; k == routeLocal && i != f {
						if a, b := tc.nodes[f].fsm.applied.Load(), n.fsm.applied.Load(); a < b {
							return fmt.Errorf("follower applied %d of %d", a, b)
						}
						return n.Transfer(context.Background(), tc.cfgs[f].ID)
					}
				}
				if k := tc.nodes[f].route().kind; k == routeLocal {
					return nil // it leads already
				}
				return errors.New("no ready leader")
			})
			if err != nil {
				t.Errorf("moving the leadership to the follower: %v", err)
			}
		}}
	})

	res := make([]engine.Result, 1)
	err := tc.nodes[f].Execute(context.Background(), []engine.Op{decide("moved", tokenRule, 1)}, res)
	if k := tc.nodes[f].route().kind; k != routeLocal {
		t.Fatalf("the leadership did not move to the follower (route %d)", k)
	}
	if err != nil || !res[0].Allowed || res[0].Remaining != tokenRule.Limit-3 {
		t.Fatalf("re-sent batch: %+v, %v; want the first copy's reply (allowed, remaining %d)", res[0], err, tokenRule.Limit-3)
	}
	tc.waitConverged(f)
	for i, e := range tc.engines {
		rs := make([]engine.Result, 1)
		e.Apply(tc.clock.now(), []engine.Op{{Code: engine.OpPeek, Key: []byte("moved")}}, rs)
		if rs[0].Remaining != tokenRule.Limit-3 {
			t.Fatalf("node %d: remaining %d, want %d", i+1, rs[0].Remaining, tokenRule.Limit-3)
		}
	}
}
