package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// The process tests of planned handovers (docs/operations.md, "Stopping a
// node" and "Rolling restart"): three nodes with --shards 3 under load
// from clients on every node, while each node in turn is stopped with
// SIGTERM and restarted, or one is killed and restarted so that the
// balancer hands its group back. Clients count every error they see, by
// kind; a client whose node went away moves to the next node.

// handoverBinary is the sluice binary these tests run: $SLUICE_BIN when
// set (an absolute path; `go build -o bin/sluice ./cmd/sluice`), else the
// one TestMain built.
func handoverBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		return binary
	}
	if !filepath.IsAbs(bin) {
		t.Fatalf("SLUICE_BIN=%s: want an absolute path", bin)
	}
	return bin
}

// handoverCluster is a testCluster of three --shards 3 nodes run from
// bin, balanced and serving.
type handoverCluster struct {
	*testCluster
	bin string
	up  []atomic.Bool // node i runs and serves (the clients' view)
}

func newHandoverCluster(t *testing.T) *handoverCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := handoverBinary(t)
	hc := &handoverCluster{bin: bin, up: make([]atomic.Bool, 3)}
	hc.testCluster = layoutTestCluster(t, proccluster.Config{Bin: bin, Nodes: 3, Shards: shardCount, Flags: testFlags("info")})
	hc.startAll()
	hc.waitServing(hc.nodes...)
	hc.waitBalanced(60 * time.Second)
	for i := range hc.up {
		hc.up[i].Store(true)
	}
	return hc
}

// start starts node i (again).
func (hc *handoverCluster) start(i int) {
	hc.t.Helper()
	hc.testCluster.start(hc.nodes[i])
}

// handoverLimit and handoverCalls: each limit gets handoverCalls calls (half
// are denials once it is spent) before the clients move to the next.
const handoverLimit, handoverCalls = 10, 20

// errKind names an error as the clients' tallies count it: the first word
// of an error reply (CLUSTERDOWN, UNCERTAIN, LOADING, ...), or "conn:" and
// what the connection did.
func errKind(err error) (kind string, conn bool) {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		word, _, _ := strings.Cut(err.Error(), " ")
		return word, false
	}
	s := err.Error()
	for _, k := range []string{"EOF", "connection reset", "connection refused", "broken pipe", "i/o timeout", "use of closed", "pool timeout"} {
		if strings.Contains(s, k) {
			return "conn:" + k, true
		}
	}
	return "conn:" + s, true
}

// isConnErr says whether err is a connection's failure, not a reply.
func isConnErr(err error) bool {
	_, conn := errKind(err)
	return conn
}

// handoverLoad is the clients of a handover test and what they saw.
type handoverLoad struct {
	hc      *handoverCluster
	tags    [shardCount]string
	next    [shardCount]atomic.Int64
	decided atomic.Int64
	// earlyCalls counts the calls answered (decided or failed with an
	// error reply) of the clients started by early.
	earlyCalls atomic.Int64
	homes      []atomic.Int32 // by client: the node it sends to
	stop       chan struct{}
	wg         sync.WaitGroup

	mu      sync.Mutex
	phase   string
	tallies limitTallies[string]
	errs    map[string]map[string]int // phase -> kind -> count
	calls   map[string][]int          // phase -> calls by the node they were sent to
}

func newHandoverLoad(hc *handoverCluster, prefix string) *handoverLoad {
	l := &handoverLoad{hc: hc, stop: make(chan struct{}), phase: "before", tallies: limitTallies[string]{},
		errs: map[string]map[string]int{}, calls: map[string][]int{}}
	table := shardTable(hc.t)
	for g := range l.tags {
		l.tags[g] = keyInGroup(table, prefix, g)
	}
	return l
}

func (l *handoverLoad) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

// record counts one call's outcome on key, and its error by kind: a
// connection error of a node that is down (stopping, stopped, killed) is
// counted apart, as "conn-to-down-node".
func (l *handoverLoad) record(key string, res []int64, err error, home int) {
	out := classify(res, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tallies.count(key, out)
	if out == outAdmitted || out == outDenied {
		l.decided.Add(1)
	}
	if l.calls[l.phase] == nil {
		l.calls[l.phase] = make([]int, len(l.hc.nodes))
	}
	l.calls[l.phase][home]++
	if err == nil {
		return
	}
	kind, conn := errKind(err)
	if conn && !l.hc.up[home].Load() {
		kind = "conn-to-down-node"
	}
	m := l.errs[l.phase]
	if m == nil {
		m = map[string]int{}
		l.errs[l.phase] = m
	}
	m[kind]++
}

// key returns the next limit key of group g for one call.
func (l *handoverLoad) key(g int) string {
	return "{" + l.tags[g] + "}:" + strconv.FormatInt(l.next[g].Add(1)/handoverCalls, 10)
}

// run starts, on every node, plain go-redis clients of one RL.TOKEN call
// at a time and clients that send pipelines of four (one Execute batch on
// the node). None retries: a retry after a broken connection could apply
// a call twice behind one reply. A client whose call failed on its
// connection moves to the next node that is up.
func (l *handoverLoad) run() {
	ctx := context.Background()
	l.homes = make([]atomic.Int32, 3*len(l.hc.nodes))
	for home := range l.hc.nodes {
		for c := range 3 {
			pipe := 1
			if c == 2 {
				pipe = 4
			}
			id := 3*home + c
			l.homes[id].Store(int32(home))
			l.wg.Add(1)
			go l.client(ctx, id, home, pipe, nil)
		}
	}
}

// early starts a client on node i, which is starting: it sends from the
// moment the node listens (a connection refused before then counts as one
// to a down node), while the node replays its log and catches up, until
// the returned function is called.
func (l *handoverLoad) early(i int) (stop func()) {
	ch := make(chan struct{})
	base, calls := l.decided.Load(), l.earlyCalls.Load()
	l.wg.Add(1)
	go l.client(context.Background(), -1, i, 1, ch) // -1: not in homes (it never moves)
	start := time.Now()
	// Up to 30s for its first answer; the log line says how long it took.
	_ = testkit.Poll(30*time.Second, time.Millisecond, func() error {
		if l.earlyCalls.Load() == calls {
			return errors.New("no call answered")
		}
		return nil
	})
	l.hc.t.Logf("%s: the first call of a client on it was answered %s after it started (%d decisions meanwhile)",
		l.hc.nodes[i].ID, time.Since(start).Round(time.Millisecond), l.decided.Load()-base)
	return func() { close(ch) }
}

// waitMoved waits until no client sends to node i.
func (l *handoverLoad) waitMoved(i int) {
	l.hc.t.Helper()
	l.hc.settle(30*time.Second, 20*time.Millisecond, "clients leaving "+l.hc.nodes[i].ID, func() string {
		n := 0
		for j := range l.homes {
			if l.homes[j].Load() == int32(i) {
				n++
			}
		}
		if n > 0 {
			return fmt.Sprintf("%d clients still on it", n)
		}
		return ""
	})
}

// client is one client, homes[id] (id -1: none); with stop set, it stays
// on its node (retrying there) and ends when stop is closed.
func (l *handoverLoad) client(ctx context.Context, id, home, pipe int, stop chan struct{}) {
	defer l.wg.Done()
	hc := l.hc
	dial := func(i int) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: hc.nodes[i].RESP, Protocol: 2, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 5 * time.Second, PoolSize: 1})
	}
	cl := dial(home)
	defer func() { cl.Close() }()
	for g := 0; ; g = (g + 1) % shardCount {
		select {
		case <-l.stop:
			return
		case <-stop:
			return
		default:
		}
		failed := false
		if pipe == 1 {
			key := l.key(g)
			res, err := cl.Do(ctx, "RL.TOKEN", key, handoverLimit, "1/d").Int64Slice()
			l.record(key, res, err, home)
			failed = err != nil
			if stop != nil && (err == nil || !isConnErr(err)) {
				l.earlyCalls.Add(1)
			}
		} else {
			p := cl.Pipeline()
			keys := make([]string, pipe)
			cmds := make([]*redis.Cmd, pipe)
			for i := range cmds {
				keys[i] = l.key(g)
				cmds[i] = p.Do(ctx, "RL.TOKEN", keys[i], handoverLimit, "1/d")
			}
			_, _ = p.Exec(ctx)
			for i, cmd := range cmds {
				res, err := cmd.Int64Slice()
				l.record(keys[i], res, err, home)
				failed = failed || err != nil
			}
		}
		if !failed {
			continue
		}
		// Its node is going away (or a real error: counted, and the
		// client looks elsewhere all the same): the next node that is up.
		time.Sleep(10 * time.Millisecond)
		if stop != nil {
			continue
		}
		for i := 1; i <= len(hc.nodes); i++ {
			if n := (home + i) % len(hc.nodes); hc.up[n].Load() {
				if n != home {
					cl.Close()
					home, cl = n, dial(n)
					l.homes[id].Store(int32(n))
				}
				break
			}
		}
	}
}

// waitDecided waits until the clients made n more decisions.
func (l *handoverLoad) waitDecided(what string, n int64, timeout time.Duration) {
	l.hc.t.Helper()
	base := l.decided.Load()
	l.hc.settle(timeout, 20*time.Millisecond, what, func() string {
		if got := l.decided.Load() - base; got < n {
			return fmt.Sprintf("%d decisions of %d", got, n)
		}
		return ""
	})
}

func (l *handoverLoad) halt() {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	l.wg.Wait()
}

// errors renders phase's error counts, sorted; "none" when there were none
// but connections to a down node (only those when conns is false).
func (l *handoverLoad) errorsIn(phase string, conns bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, n := range l.errs[phase] {
		if k == "conn-to-down-node" && !conns {
			continue
		}
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// callsIn returns the calls sent to each node in phase.
func (l *handoverLoad) callsIn(phase string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls[phase])
}

// checkLimits spends every limit the clients touched, through the node
// that leads its group, and checks that none admitted more than its limit
// and that none hid a charge (spent before its acknowledged admissions
// and the calls that may have applied reach the limit); it returns the
// number of limits and of uncertain calls.
func (l *handoverLoad) checkLimits() (limits, uncertain int) {
	t := l.hc.t
	t.Helper()
	table := shardTable(t)
	ctx := context.Background()
	direct := make([]*redis.Client, shardCount)
	for g := range direct {
		direct[g] = l.hc.client(l.hc.preferred(g))
	}
	_, uncertain = l.tallies.spendAll(t, handoverLimit, func(key string) bool {
		res, err := direct[table.Group(slots.Of([]byte(key)))].Do(ctx, "RL.TOKEN", key, handoverLimit, "1/d").Int64Slice()
		if err != nil || len(res) != 5 {
			t.Fatalf("spending %s: %v %v", key, res, err)
		}
		return res[0] != 0
	})
	return len(l.tallies), uncertain
}

// checkDigests waits until every node's DEBUG DIGEST (its own replica of
// every group) is the same: nothing acknowledged is missing anywhere.
func (hc *handoverCluster) checkDigests() {
	hc.t.Helper()
	hc.settle(20*time.Second, 100*time.Millisecond, "the replicas' digests", func() string {
		var digests []string
		for _, p := range hc.nodes {
			r := hc.probe(p)
			d, err := r.Do(context.Background(), "DEBUG", "DIGEST").Text()
			r.Close()
			if err != nil {
				return p.ID + ": " + err.Error()
			}
			digests = append(digests, d)
		}
		for _, d := range digests[1:] {
			if d != digests[0] {
				return fmt.Sprintf("digests differ: %v", digests)
			}
		}
		return ""
	})
}

// logLines logs the lines of node p's log that contain any of words.
func (hc *handoverCluster) logLines(p *proc, words ...string) {
	b, _ := os.ReadFile(p.Dir + ".log")
	for _, line := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				hc.t.Logf("%s: %s", p.ID, line)
				break
			}
		}
	}
}

// freeze freezes every group's clock: no refill, so each limit is exact.
func (hc *handoverCluster) freeze() {
	hc.t.Helper()
	if err := hc.client(hc.nodes[0]).Do(context.Background(), "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		hc.t.Fatal(err)
	}
}

// TestRollingRestartNoErrors: a rolling restart of three nodes with
// --shards 3 (each node in turn stopped with SIGTERM, restarted, and given
// its group back by the balancer) under load from clients on every node,
// plain and pipelined, on limits shared by all, and from a client that
// sends to each restarted node from the moment it listens (while it
// replays its log): the clients see no error at all (no CLUSTERDOWN,
// UNCERTAIN or LOADING) but connections to the stopping node closing (they
// move to another node), no limit admits more than its budget or hides a
// charge, and every replica ends with the same state.
func TestRollingRestartNoErrors(t *testing.T) {
	hc := newHandoverCluster(t)
	hc.freeze()
	load := newHandoverLoad(hc, "roll")
	load.run()
	defer load.halt()
	load.waitDecided("before the restarts", 300, 30*time.Second)
	for i, p := range hc.nodes {
		phase := "restart " + p.ID
		load.setPhase(phase)
		hc.up[i].Store(false)
		start := time.Now()
		hc.stop(p) // SIGTERM; fails the test unless it exits cleanly
		stopped := time.Since(start)
		hc.logLines(p, "shutting down", "handover", "stopped", "closing")
		// Down for a while (an upgrade swaps the binary): its clients
		// move to the other nodes, which serve every group meanwhile.
		load.waitMoved(i)
		load.waitDecided("while "+p.ID+" is down", 200, 30*time.Second)
		hc.start(i)
		stopEarly := load.early(i)
		hc.waitServing(p)
		hc.up[i].Store(true)
		hc.waitBalanced(60 * time.Second)
		stopEarly()
		load.waitDecided("after restarting "+p.ID, 200, 30*time.Second)
		t.Logf("%s: stopped in %s, back and balanced %s after the SIGTERM; calls by node %v; errors: %s", p.ID,
			stopped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), load.callsIn(phase), load.errorsIn(phase, true))
	}
	load.setPhase("after")
	load.waitDecided("after the restarts", 200, 30*time.Second)
	load.halt()
	limits, uncertain := load.checkLimits()
	hc.checkDigests()
	all := map[string]int{}
	for _, m := range load.errs {
		for k, n := range m {
			all[k] += n
		}
	}
	t.Logf("%d decisions on %d limits, %d uncertain calls; errors over the whole run: %v", load.decided.Load(), limits, uncertain, all)
	for phase := range load.errs {
		if e := load.errorsIn(phase, false); e != "none" {
			t.Errorf("%s: clients saw errors beyond connections to the stopping node: %s", phase, e)
		}
	}
}

// TestKillRestartHandback: the node leading group 1 is killed (SIGKILL)
// under load, group 1 fails over, the node restarts on its data dir (a
// client sends to it from the moment it listens) and the balancer hands
// its group back. A crash may answer UNCERTAIN or
// CLUSTERDOWN (docs/commands.md) to the calls it caught; the handback is
// a planned transfer and answers no error. The counts of each phase are
// logged; no limit admits more than its budget or hides a charge, and the
// replicas end equal.
func TestKillRestartHandback(t *testing.T) {
	hc := newHandoverCluster(t)
	hc.freeze()
	load := newHandoverLoad(hc, "kill")
	load.run()
	defer load.halt()
	load.waitDecided("before the kill", 300, 30*time.Second)

	victim := hc.preferred(1)
	vi := slices.Index(hc.nodes, victim)
	load.setPhase("crash")
	hc.up[vi].Store(false)
	hc.kill(victim)
	load.waitDecided("after the kill", 300, 30*time.Second)

	load.setPhase("handback")
	start := time.Now()
	hc.start(vi)
	stopEarly := load.early(vi)
	hc.waitServing(victim)
	hc.up[vi].Store(true)
	hc.waitBalanced(60 * time.Second)
	load.waitDecided("after the handback", 300, 30*time.Second)
	stopEarly()
	t.Logf("%s restarted and given group 1 back in %s", victim.ID, time.Since(start).Round(time.Millisecond))

	load.setPhase("after")
	load.waitDecided("after", 200, 30*time.Second)
	load.halt()
	limits, uncertain := load.checkLimits()
	hc.checkDigests()
	t.Logf("%d decisions on %d limits, %d uncertain calls; errors: crash: %s; handback: %s; before: %s; after: %s",
		load.decided.Load(), limits, uncertain, load.errorsIn("crash", true), load.errorsIn("handback", true),
		load.errorsIn("before", true), load.errorsIn("after", true))
	for _, phase := range []string{"before", "handback", "after"} {
		if e := load.errorsIn(phase, true); e != "none" {
			t.Errorf("%s: clients saw errors: %s", phase, e)
		}
	}
}

// TestShutdownBounded: a graceful stop waits for the commands a node has
// taken in, but no longer than --shutdown-timeout, and a second signal
// ends it at once. The node's peers are killed, so that a command sent to
// it waits (for a majority) through the whole --cluster-timeout of 20 s.
func TestShutdownBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct {
		name   string
		flags  []string
		second bool // a second SIGTERM, 300 ms after the first
	}{
		{"shutdown-timeout", []string{"--shutdown-timeout", "1s"}, false},
		{"second signal", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClusterWith(t, 3, func(nodes []*proc) {
				for _, p := range nodes {
					p.Extra = append(p.Extra, "--cluster-timeout", "20s")
				}
				nodes[0].Extra = append(nodes[0].Extra, tc.flags...)
			})
			c.waitServing(c.nodes...)
			p := c.nodes[0]
			c.kill(c.nodes[1])
			c.kill(c.nodes[2])
			r := c.client(p)
			done := make(chan error, 1)
			go func() { done <- r.Do(context.Background(), "RL.TOKEN", "k", "5", "1/s").Err() }()
			time.Sleep(300 * time.Millisecond) // the command is taken in, waiting for a majority
			start := time.Now()
			run := p.Process()
			if err := c.Signal(p, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tc.second {
				time.Sleep(300 * time.Millisecond)
				select {
				case <-run.Exited():
					t.Fatal("the node stopped before the command it took in was answered")
				default:
				}
				if err := c.Signal(p, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-run.Exited():
			case <-time.After(10 * time.Second):
				t.Fatalf("still running %s after the signal", time.Since(start).Round(time.Millisecond))
			}
			took := time.Since(start)
			exitErr := run.Err()
			if exitErr != nil {
				t.Fatalf("exit: %v, want a clean one", exitErr)
			}
			// 1 s of timeout or 0.3 s before the second signal, plus the
			// close (and the race detector's 1 s at exit, when built with it).
			least := time.Second
			if tc.second {
				least = 300 * time.Millisecond
			}
			if took < least || took > 5*time.Second {
				t.Fatalf("stopped %s after the first signal, want %s to 5s", took.Round(time.Millisecond), least)
			}
			t.Logf("stopped %s after the first signal; the waiting command: %v", took.Round(time.Millisecond), <-done)
		})
	}
}
