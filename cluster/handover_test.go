package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/slots"
)

// handoverLoad is clients calling Execute in a loop, each a pipeline of
// decisions on one shared key whose limit is never reached (the test clock
// does not move, so nothing refills): every admission is one token taken,
// and the tokens the key lost must equal the admissions acknowledged.
type handoverLoad struct {
	key      string
	rule     engine.Rule
	admitted atomic.Int64
	calls    atomic.Int64
	stopped  chan struct{}
	wg       sync.WaitGroup

	mu   sync.Mutex
	errs map[string]int // by error code (or text)
}

// handoverLimit is the shared key's budget: far more than a test takes.
const handoverLimit = 1 << 40

func newHandoverLoad(key string) *handoverLoad {
	return &handoverLoad{
		key:     key,
		rule:    engine.Rule{Kind: engine.KindToken, Limit: handoverLimit, Period: int64(time.Hour)},
		stopped: make(chan struct{}),
		errs:    map[string]int{},
	}
}

// run starts clients on exec, each sending pipelines of pipe decisions,
// until stop returns true or halt is called.
func (l *handoverLoad) run(clients, pipe int, exec func(context.Context, []engine.Op, []engine.Result) error, stop func() bool) {
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ops := make([]engine.Op, pipe)
			for i := range ops {
				ops[i] = decide(l.key, l.rule, 1)
			}
			res := make([]engine.Result, pipe)
			for {
				select {
				case <-l.stopped:
					return
				default:
				}
				if stop != nil && stop() {
					return
				}
				l.calls.Add(1)
				err := exec(context.Background(), ops, res)
				if err != nil {
					l.fail(err)
					continue
				}
				for _, r := range res {
					switch {
					case r.Err != nil:
						l.fail(r.Err)
					case r.Allowed:
						l.admitted.Add(1)
					default:
						l.fail(errors.New("denied"))
					}
				}
			}
		}()
	}
}

func (l *handoverLoad) fail(err error) {
	kind := err.Error()
	if e := errcode.Of(err); e != nil {
		kind = e.Code.String()
	}
	l.mu.Lock()
	l.errs[kind]++
	l.mu.Unlock()
}

func (l *handoverLoad) halt() {
	close(l.stopped)
	l.wg.Wait()
}

// errors renders the errors seen, sorted; "" when none.
func (l *handoverLoad) errors() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, n := range l.errs {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// checkCharged checks that the key lost exactly the tokens acknowledged
// (to these clients and those of also, on the same key).
func (l *handoverLoad) checkCharged(t *testing.T, exec func(context.Context, []engine.Op, []engine.Result) error, also ...*handoverLoad) {
	t.Helper()
	for _, o := range also {
		l.admitted.Add(o.admitted.Load())
		l.calls.Add(o.calls.Load())
	}
	res := make([]engine.Result, 1)
	if err := exec(context.Background(), []engine.Op{decide(l.key, l.rule, 0)}, res); err != nil {
		t.Fatalf("peek: %v", err)
	}
	charged := handoverLimit - res[0].Remaining
	if got := l.admitted.Load(); charged != got || got == 0 {
		t.Fatalf("the key was charged %d tokens; clients were told %d admissions (over %d calls)", charged, got, l.calls.Load())
	}
}

// TestTransfersUnderLoadFailNothing: leadership moves again and again
// (RAFT.TRANSFER's path) while clients on every host send pipelines: no
// command fails, and the shared key is charged exactly what the clients
// were told (nothing applied twice, nothing acknowledged lost).
func TestTransfersUnderLoadFailNothing(t *testing.T) {
	th := newTestHosts(t, 3, 1, nil)
	load := newHandoverLoad("shared")
	for _, h := range th.hosts {
		load.run(4, 8, h.Execute, nil)
	}
	for i := range 6 {
		time.Sleep(100 * time.Millisecond)
		l := th.leaders()[0]
		if l < 0 {
			t.Fatalf("transfer %d: no leader", i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := th.hosts[l].Transfer(ctx, 0, "")
		cancel()
		if err != nil {
			t.Fatalf("transfer %d from host %d: %v", i, l+1, err)
		}
		waitFor(t, 5*time.Second, func() error {
			if k := th.leaders()[0]; k < 0 || k == l {
				return fmt.Errorf("leader still host %d", k+1)
			}
			return nil
		})
	}
	time.Sleep(100 * time.Millisecond)
	load.halt()
	if e := load.errors(); e != "" {
		t.Errorf("clients saw errors: %s", e)
	}
	load.checkCharged(t, th.hosts[0].Execute)
	t.Logf("%d calls, %d admitted, %s", load.calls.Load(), load.admitted.Load(), resolvedCounts(th))
}

// resolvedCounts sums the entries resolved after a lost leadership, by
// outcome, over every host and group.
func resolvedCounts(th *testHosts) string {
	sum := map[string]float64{}
	for _, h := range th.hosts {
		if h == nil {
			continue
		}
		for _, n := range h.nodes {
			for _, o := range []string{"applied", "not_applied", "unknown"} {
				c, err := n.metrics.resolvedVec.GetMetricWithLabelValues(o)
				if err != nil {
					continue
				}
				sum[o] += counterValue(c)
			}
		}
	}
	return fmt.Sprintf("resolved after a lost leadership: applied %v, not applied %v, unknown %v",
		sum["applied"], sum["not_applied"], sum["unknown"])
}

// TestHostHandoverUnderLoad: a host of a three-group cluster hands over
// before it stops, under load from clients on every host (its own
// included): it ends up leading nothing (a transfer to it fails, and a
// group it wins in an election it hands over again), every command is
// answered without error (the stopping host's own clients through
// forwarding), it closes, the others serve on, and the shared key is
// charged exactly what was acknowledged.
func TestHostHandoverUnderLoad(t *testing.T) {
	const shards = 3
	th := newTestHosts(t, 3, shards, nil)
	th.waitBalanced(20 * time.Second)
	load, own := newHandoverLoad("shared"), newHandoverLoad("shared")
	own.run(3, 8, th.hosts[0].Execute, nil)
	for _, h := range th.hosts[1:] {
		load.run(3, 8, h.Execute, nil)
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := th.hosts[0].Handover(ctx); err != nil {
		t.Fatalf("handover: %v", err)
	}
	for g, l := range th.leaders() {
		if l == 0 {
			t.Fatalf("group %d is led by the stopping host after its handover (leaders %v)", g, th.leaders())
		}
	}
	// A transfer to it (what the balancers of the others try, since it is
	// group 0's preferred member) fails: it takes no leadership.
	if l := th.leaders()[0]; l > 0 {
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := th.hosts[l].Transfer(tctx, 0, "n1")
		tcancel()
		if err == nil {
			t.Fatalf("a leadership transfer to the stopping host succeeded (leaders %v)", th.leaders())
		}
	}
	time.Sleep(1200 * time.Millisecond) // a balancing round, under load
	waitFor(t, 5*time.Second, func() error {
		for g, l := range th.leaders() {
			if l == 0 {
				return fmt.Errorf("group %d is led by the stopping host (leaders %v)", g, th.leaders())
			}
		}
		return nil
	})
	own.halt() // the RESP server's Drain, in a process
	th.stop(0)
	time.Sleep(300 * time.Millisecond)
	load.halt()
	if e := own.errors(); e != "" {
		t.Errorf("the stopping host's clients saw errors: %s", e)
	}
	if e := load.errors(); e != "" {
		t.Errorf("the other hosts' clients saw errors: %s", e)
	}
	load.checkCharged(t, th.hosts[1].Execute, own)
	t.Logf("%d calls, %d admitted, %s", load.calls.Load(), load.admitted.Load(), resolvedCounts(th))
}

// TestLostEntryRoutedAgain: a leader cut off from the others takes a
// command, hands it to Raft and loses its leadership before the entry
// commits; the others elect a leader whose log overwrites the entry. Once
// the old leader rejoins and applies past the entry's index, it knows the
// entry was not applied, and routes the command to the new leader instead
// of answering UNCERTAIN: the client gets an answer, charged once.
func TestLostEntryRoutedAgain(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) { c.ClusterTimeout = 5 * time.Second })
	l := tc.leader()
	key := "lost"
	tc.isolate(l)
	errc := make(chan error, 1)
	res := make([]engine.Result, 1)
	go func() {
		errc <- tc.nodes[l].Execute(context.Background(), []engine.Op{decide(key, tokenRule, 1)}, res)
	}()
	// A new leader among the others, and one command through it.
	other := (l + 1) % 3
	waitFor(t, 5*time.Second, func() error {
		if k := tc.nodes[other].route().kind; k != routeLocal && k != routeForward {
			return errors.New("no new leader yet")
		}
		if tc.nodes[l].raft.State() == raft.Leader {
			return errors.New("the old leader still leads")
		}
		return nil
	})
	exec(t, tc.nodes[other], decide("other", tokenRule, 1))
	tc.heal(l)
	if err := <-errc; err != nil {
		t.Fatalf("the command caught by the lost leadership: %v (want its answer)", err)
	}
	if !res[0].Allowed || res[0].Remaining != tokenRule.Limit-1 {
		t.Fatalf("result %+v, want admitted with %d left", res[0], tokenRule.Limit-1)
	}
	r := exec(t, tc.nodes[other], decide(key, tokenRule, 0))
	if r[0].Remaining != tokenRule.Limit-1 {
		t.Fatalf("the key has %d left, want %d: charged once", r[0].Remaining, tokenRule.Limit-1)
	}
	c, _ := tc.nodes[l].metrics.resolvedVec.GetMetricWithLabelValues("not_applied")
	if got := counterValue(c); got != 1 {
		t.Fatalf("entries resolved as not applied on the old leader: %v, want 1", got)
	}
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestFSMOutcome: what a node that lost its leadership learns of an entry
// it appended, from its own log: pending until its log applies the index;
// applied, with the results the entry decided; not applied when another
// entry holds the index; unknown when a snapshot restore passed over it.
func TestFSMOutcome(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4})
	f := newFSM(eng, testLogger(t), nil)
	stamp := int64(1e18)
	ours := batchEntry(stamp, []codec.BatchID{{}}, [][]engine.Op{{decide("a", tokenRule, 1)}})
	theirs := batchEntry(stamp, []codec.BatchID{{}}, [][]engine.Op{{decide("b", tokenRule, 2)}})
	id := entryID(ours)
	f.await(id)
	restores := f.restores.Load()
	if st, _ := f.outcome(id, 1, restores); st != outcomePending {
		t.Fatalf("before index 1 applied: %d, want pending", st)
	}
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: ours})
	st, rs := f.outcome(id, 1, restores)
	if st != outcomeApplied || len(rs) != 1 || !rs[0].Allowed || rs[0].Remaining != tokenRule.Limit-1 {
		t.Fatalf("applied at index 1: %d %+v, want applied with its results", st, rs)
	}
	f.forget(id, 1)
	if len(f.outcomes) != 0 {
		t.Fatalf("outcomes kept after forget: %v", f.outcomes)
	}
	// Another entry took index 2.
	f.await(id)
	f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: theirs})
	if st, _ := f.outcome(id, 2, restores); st != outcomeNotApplied {
		t.Fatalf("another entry at index 2: %d, want not applied", st)
	}
	// A snapshot restore moved past index 3.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	f.applied.Store(0)
	if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	f.applied.Store(5)
	if st, _ := f.outcome(id, 3, restores); st != outcomeUnknown {
		t.Fatalf("after a restore past index 3: %d, want unknown", st)
	}
	f.forget(id, 0)
}

// TestReplayingGroupForwardsWithHostAddresses: a group still replaying its
// log whose own log has not told it the leader's forward address yet
// forwards with the address another group of its host knows (a member has
// the same addresses in every group), rather than answering LOADING.
func TestReplayingGroupForwardsWithHostAddresses(t *testing.T) {
	th := newTestHosts(t, 3, 2, nil)
	th.waitBalanced(20 * time.Second)
	// Host 0 follows group 1 (led by host 1 once balanced).
	n := th.hosts[0].nodes[1]
	var leader raft.ServerID
	waitFor(t, 10*time.Second, func() error {
		if _, leader = n.raft.LeaderWithID(); leader == "" || string(leader) == n.cfg.ID {
			return fmt.Errorf("group 1's leader seen from host 1: %q", leader)
		}
		if _, ok := th.hosts[0].nodes[0].fsm.leader(string(leader)); !ok {
			return fmt.Errorf("group 0's log on host 1 has no addresses of %s yet", leader)
		}
		return nil
	})
	// As at start, while replaying: the group's log has not told the
	// leader's addresses yet.
	n.fsm.mu.Lock()
	delete(n.fsm.leaders, string(leader))
	n.fsm.mu.Unlock()
	r := n.route()
	if want, _ := th.hosts[0].nodes[0].fsm.leader(string(leader)); r.kind != routeForward || r.addr != want.Forward {
		t.Fatalf("route: %v %q, want a forward to %q", r.kind, r.addr, want.Forward)
	}
	table, _ := slots.Even(2)
	key := keyIn(t, table, 1, "replay:")
	if r := hostExec(t, th.hosts[0], decide(key, tokenRule, 1)); !r[0].Allowed {
		t.Fatalf("a command of the replaying group: %+v", r[0])
	}
}

// TestLostEntryCommittedByNewLeader: a leader of five appends a command's
// entry that only one follower, A, receives (the others are cut off from
// it and from each other, but not from A), and loses its leadership before
// the entry commits. A, whose log is the longest, wins the election and
// commits the entry. Once the old leader rejoins and applies it, its
// caller gets the entry's real results instead of UNCERTAIN.
func TestLostEntryCommittedByNewLeader(t *testing.T) {
	tc := newTestCluster(t, 5, func(_ int, c *Config) { c.ClusterTimeout = 5 * time.Second })
	l := tc.leader()
	a := (l + 1) % 5
	var others []int
	for i := range 5 {
		if i != l && i != a {
			others = append(others, i)
		}
	}
	cut := tc.cut
	for _, i := range others {
		cut(l, i)
		for _, j := range others {
			if i < j {
				cut(i, j)
			}
		}
	}
	errc := make(chan error, 1)
	res := make([]engine.Result, 1)
	go func() {
		errc <- tc.nodes[l].Execute(context.Background(), []engine.Op{decide("lost", tokenRule, 1)}, res)
	}()
	waitFor(t, 10*time.Second, func() error {
		if k := tc.nodes[a].route().kind; k != routeLocal {
			return fmt.Errorf("node %d does not lead yet", a+1)
		}
		return nil
	})
	for i := range 5 {
		tc.heal(i)
	}
	if err := <-errc; err != nil {
		t.Fatalf("the command whose entry the new leader committed: %v (want its answer)", err)
	}
	if !res[0].Allowed || res[0].Remaining != tokenRule.Limit-1 {
		t.Fatalf("result %+v, want admitted with %d left", res[0], tokenRule.Limit-1)
	}
	r := exec(t, tc.nodes[a], decide("lost", tokenRule, 0))
	if r[0].Remaining != tokenRule.Limit-1 {
		t.Fatalf("the key has %d left, want %d: charged once", r[0].Remaining, tokenRule.Limit-1)
	}
	c, _ := tc.nodes[l].metrics.resolvedVec.GetMetricWithLabelValues("applied")
	if got := counterValue(c); got != 1 {
		t.Fatalf("entries resolved as applied on the old leader: %v, want 1", got)
	}
}
