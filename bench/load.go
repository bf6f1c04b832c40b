package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// LoadOptions say how hard and how long to drive a server.
type LoadOptions struct {
	Addrs    []string      // connection i goes to Addrs[i % len(Addrs)]
	Conns    int           // connections, each driven by one goroutine
	Pipeline int           // requests written at once before their replies are read (redis-benchmark's -P)
	Duration time.Duration // of the measured phase, unless Requests is set
	Requests int64         // when > 0, the measured phase ends after this many requests
	Warmup   time.Duration // the same load, unmeasured, before the measured phase
	Seed     uint64        // makes the key sequence reproducible
	Timeout  time.Duration // bounds a batch's round trip; a connection that exceeds it fails (default 10s)
	// Counters, if set, reads the server's counters (Target.counters),
	// which the load reads at the start and the end of the measured phase
	// with this process's CPU time: LoadResult's CPU and group commit
	// figures come from their difference (setFigures).
	Counters  func(context.Context) map[string]float64
	noLatency bool // Populate's: keep no latency
}

// Validate checks the options and fills defaults.
func (o *LoadOptions) Validate() error {
	o.Timeout = cmp.Or(o.Timeout, 10*time.Second)
	switch {
	case len(o.Addrs) == 0:
		return errors.New("no server address")
	case o.Conns < 1 || o.Pipeline < 1:
		return fmt.Errorf("conns and pipeline: want at least 1, got %d and %d", o.Conns, o.Pipeline)
	case o.Duration <= 0 && o.Requests <= 0:
		return errors.New("want a duration or a request count")
	case o.Warmup < 0:
		return fmt.Errorf("warmup: want >= 0, got %s", o.Warmup)
	}
	return nil
}

// LoadResult is what one measured run gives.
type LoadResult struct {
	Requests   int64         `json:"requests"`
	Allowed    int64         `json:"allowed"`
	Denied     int64         `json:"denied"`
	Errors     int64         `json:"errors"`
	FirstError string        `json:"first_error,omitempty"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	Throughput float64       `json:"throughput"` // requests per second
	Latency    Percentiles   `json:"latency"`
	// ServerCPU and ClientCPU are the CPU time the server's processes and
	// this process used per request in the measured phase, in ns (0 when
	// not measured). Less sensitive to a busy machine than throughput.
	ServerCPU float64 `json:"server_cpu_ns_per_req,omitempty"`
	ClientCPU float64 `json:"client_cpu_ns_per_req,omitempty"`
	// OpsPerEntry is the operations per Raft log entry committed in the
	// measured phase; CommitTime the mean time, in ns, from handing an
	// entry to Raft to its outcome on the leader; HoldTime the mean time
	// an entry's first request waited in the leader's batcher (0 when not
	// measured).
	OpsPerEntry float64   `json:"ops_per_entry,omitempty"`
	CommitTime  float64   `json:"commit_ns_per_entry,omitempty"`
	HoldTime    float64   `json:"hold_ns_per_entry,omitempty"`
	Samples     Latencies `json:"-"` // every measured request's latency
}

// The counters the figures come from: CPU seconds of the server's
// processes and of this one, and a cluster's group commit counters summed
// over its nodes (a histogram's as name_sum and name_count).
const (
	serverCPU = "server_cpu_seconds"
	clientCPU = "client_cpu_seconds"
	entries   = "sluice_raft_committed_entries_total"
	ops       = "sluice_raft_committed_ops_total"
	commits   = "sluice_raft_commit_duration_seconds"
	holds     = "sluice_batch_hold_duration_seconds"
)

// setFigures sets the CPU per request and the group commit figures per
// entry from d, the counters' difference over the measured phase (a
// counter not read is 0, and so is a figure without its counters).
func (r *LoadResult) setFigures(d map[string]float64) {
	n := float64(r.Requests)
	r.ServerCPU, r.ClientCPU = quot(d[serverCPU]*1e9, n), quot(d[clientCPU]*1e9, n)
	r.OpsPerEntry = quot(d[ops], d[entries])
	r.CommitTime = quot(d[commits+"_sum"]*1e9, d[commits+"_count"])
	r.HoldTime = quot(d[holds+"_sum"]*1e9, d[holds+"_count"])
}

// quot is a/b, 0 when b is not positive.
func quot(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// DenyShare is the measured share of denied requests among the answered.
func (r LoadResult) DenyShare() float64 { return quot(float64(r.Denied), float64(r.Allowed+r.Denied)) }

// load phases
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// source appends a connection's next request to b.
type source func(b []byte) []byte

// worker is one connection's share of a run.
type worker struct {
	conn                        *respwire.Conn
	next                        source
	replies                     int // per request: its decision is the last
	lat                         Latencies
	done, allowed, denied, errs int64
	firstErr                    string
	fail                        error
	noLatency                   bool
}

// RunLoad drives a server with workload w spelled in dialect d.
func RunLoad(ctx context.Context, w Workload, d Dialect, o LoadOptions) (LoadResult, error) {
	if err := errors.Join(w.Validate(), o.Validate()); err != nil {
		return LoadResult{}, fmt.Errorf("load: %w", err)
	}
	allow, err := d.Template(w.Alg, w.Allow)
	deny, err2 := d.Template(w.Alg, w.Deny)
	if err = cmp.Or(err, err2); err != nil {
		return LoadResult{}, err
	}
	if w.DenyShare > 0 {
		n := w.Keys
		if w.Dist == DistHot {
			n = 1
		}
		if err := Populate(ctx, o.Addrs, deny, w.DenyPrefix(), 0, n, min(o.Conns, 8)); err != nil {
			return LoadResult{}, fmt.Errorf("use up the denied keys: %w", err)
		}
	}
	var zt *ZipfTable
	if w.Dist == DistZipf {
		zt = NewZipfTable(w.Keys, ZipfTheta)
	}
	// A request picks a key index, then the allowed or the exhausted twin
	// of the key.
	allowP, denyP := w.AllowPrefix(), w.DenyPrefix()
	return drive(ctx, o, allow.Replies, func(rng *rand.Rand) source {
		pick := NewKeyPicker(w.Dist, w.Keys, rng, zt)
		return func(b []byte) []byte {
			i := pick()
			if w.DenyShare > 0 && rng.Float64() < w.DenyShare {
				return deny.AppendIndex(b, denyP, i)
			}
			return allow.AppendIndex(b, allowP, i)
		}
	})
}

// read reads the counters: the server's (o.Counters) and this process's
// CPU time.
func read(ctx context.Context, o LoadOptions) map[string]float64 {
	m := map[string]float64{}
	if o.Counters != nil {
		m = o.Counters(ctx)
	}
	if cpu, err := ProcessCPU([]int{os.Getpid()}); err == nil {
		m[clientCPU] = cpu
	}
	return m
}

// drive sends the requests of the sources newSource makes, one per
// connection, each request getting replies replies: the load loop of
// RunLoad and Populate.
func drive(ctx context.Context, o LoadOptions, replies int, newSource func(*rand.Rand) source) (LoadResult, error) {
	workers := make([]*worker, o.Conns)
	defer func() {
		for _, wk := range workers {
			if wk != nil && wk.conn != nil { // not after a failed dial
				wk.conn.Close()
			}
		}
	}()
	for i := range workers {
		rng := rand.New(rand.NewPCG(o.Seed, uint64(i)+1))
		workers[i] = &worker{next: newSource(rng), replies: max(replies, 1), noLatency: o.noLatency}
		var err error
		if workers[i].conn, err = dial(o.Addrs[i%len(o.Addrs)]); err != nil {
			return LoadResult{}, fmt.Errorf("connection %d: %w", i, err)
		}
	}
	// The counters are read before the measured phase starts, so that no
	// measured request is answered before: before the workers start
	// without a warm-up, at its end with one.
	var phase atomic.Int32
	var budget atomic.Int64 // requests left in the measured phase (request-count mode)
	budget.Store(o.Requests)
	var r0 map[string]float64
	start := time.Now()
	measure := func() {
		r0 = read(ctx, o)
		phase.Store(phaseMeasure)
		start = time.Now()
	}
	if o.Warmup <= 0 {
		measure()
	}
	var wg sync.WaitGroup
	for _, wk := range workers {
		wg.Go(func() { wk.run(ctx, o, &phase, &budget) })
	}
	// Closing the connections unblocks the workers if the context ends.
	defer context.AfterFunc(ctx, func() {
		for _, wk := range workers {
			wk.conn.SetDeadline(time.Now())
		}
	})()
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-allDone:
		case <-ctx.Done():
		}
	}
	if o.Warmup > 0 {
		wait(o.Warmup)
		measure()
	}
	if o.Requests > 0 {
		wait(math.MaxInt64) // until the budget is spent
	} else {
		wait(o.Duration)
	}
	phase.Store(phaseStop)
	<-allDone
	res := LoadResult{Elapsed: time.Since(start)}
	r1 := read(ctx, o)
	var fails []error
	for i, wk := range workers {
		res.Samples.Merge(wk.lat)
		res.Requests, res.Allowed, res.Denied, res.Errors = res.Requests+wk.done, res.Allowed+wk.allowed, res.Denied+wk.denied, res.Errors+wk.errs
		res.FirstError = cmp.Or(res.FirstError, wk.firstErr)
		if wk.fail != nil {
			fails = append(fails, fmt.Errorf("connection %d: %w", i, wk.fail))
		}
	}
	res.Throughput = float64(res.Requests) / max(res.Elapsed.Seconds(), 1e-9)
	res.Latency = res.Samples.Summary()
	for k, v := range r1 { // the difference of the counters read at both ends
		if v0, ok := r0[k]; ok {
			r1[k] = v - v0
		} else {
			delete(r1, k)
		}
	}
	res.setFigures(r1)
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("load: %w", ctx.Err())
	case len(fails) == len(workers):
		return res, fmt.Errorf("every connection failed: %w", errors.Join(fails...))
	case len(fails) > 0:
		return res, fmt.Errorf("%d of %d connections failed: %w", len(fails), len(workers), fails[0])
	}
	return res, nil
}

// run drives one connection until the phase is stop or the budget is
// spent: it writes a batch of requests, then reads their replies. Only
// batches sent in the measured phase count, so that every request counted
// was sent and answered between the start and the end of the phase.
func (wk *worker) run(ctx context.Context, o LoadOptions, phase *atomic.Int32, budget *atomic.Int64) {
	var buf []byte
	var lastDeadline time.Time
	for ctx.Err() == nil {
		ph, n := phase.Load(), o.Pipeline
		if ph == phaseStop {
			return
		}
		if ph == phaseMeasure && o.Requests > 0 {
			if left := budget.Add(-int64(n)); left+int64(n) <= 0 {
				return
			} else if left < 0 {
				n += int(left)
			}
		}
		buf = buf[:0]
		for range n {
			buf = wk.next(buf)
		}
		t0 := time.Now()
		if t0.Sub(lastDeadline) > o.Timeout/4 { // renewing per batch costs a timer update
			lastDeadline = t0
			_ = wk.conn.SetDeadline(t0.Add(o.Timeout))
		}
		wk.conn.AppendRaw(buf)
		if wk.fail = wk.conn.Flush(); wk.fail != nil || !wk.readReplies(n, ph == phaseMeasure, t0) {
			return
		}
		if ph == phaseMeasure {
			wk.done += int64(n)
		}
	}
}

// readReplies reads n decisions from c and, in the measured phase, records
// them; false when the connection failed (wk.fail says why).
func (wk *worker) readReplies(n int, measured bool, t0 time.Time) bool {
	c := wk.conn
	for range n {
		for range wk.replies - 1 {
			if wk.fail = respwire.Skip(c.Reader, limits); wk.fail != nil {
				return false
			}
		}
		d, err := readDecision(c.Reader)
		if wk.fail = err; err != nil {
			return false
		}
		if !measured {
			continue
		}
		if !wk.noLatency {
			wk.lat.Record(int64(time.Since(t0)))
		}
		switch {
		case d.Err:
			wk.errs++
			wk.firstErr = cmp.Or(wk.firstErr, d.Msg)
		case d.Allowed == 1:
			wk.allowed++
		default:
			wk.denied++
		}
	}
	return true
}

// Populate sends the request of template t once for every key
// prefix+index, index in [from, to), over conns pipelined connections, and
// fails on any error reply. The suite uses it to create live keys (memory)
// and to use up the limits of the keys a workload's denied share goes to.
func Populate(ctx context.Context, addrs []string, t Template, prefix string, from, to uint64, conns int) error {
	if to <= from {
		return nil
	}
	var next atomic.Uint64
	next.Store(from)
	o := LoadOptions{Addrs: addrs, Conns: max(1, min(conns, int((to-from+255)/256))), Pipeline: 256, Requests: int64(to - from), Timeout: 30 * time.Second, noLatency: true}
	res, err := drive(ctx, o, t.Replies, func(*rand.Rand) source {
		return func(b []byte) []byte { return t.AppendIndex(b, prefix, next.Add(1)-1) } // the budget stops it at to
	})
	if err == nil && res.Errors > 0 {
		err = errors.New(res.FirstError)
	}
	if err != nil {
		return fmt.Errorf("populate %s[%d,%d): %w", prefix, from, to, err)
	}
	return nil
}

// limits bound the replies the load generator accepts: generous, since it
// talks to servers it started itself, but finite.
var limits = respwire.Limits{MaxBulk: 512 << 20, MaxElems: 1 << 24}

// dial connects to addr with the large buffers a pipelined load wants.
func dial(addr string) (*respwire.Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := respwire.NewConn(nc)
	c.Reader, c.Limits = bufio.NewReaderSize(nc, 64<<10), limits
	return c, nil
}

// doAt runs one command on a fresh connection to addr; an error reply is
// an error.
func doAt(addr string, args ...string) (respwire.Value, error) {
	v, err := respwire.DoAt(addr, time.Minute, args...)
	if err == nil && v.Error() != "" {
		err = fmt.Errorf("%s: %s", args[0], v.Error())
	}
	return v, err
}

// Decision is what the load loop keeps of one limiter reply: the first
// integer of an array reply (sluice's "allowed"), or the integer itself
// (the anchor Lua script's 1 or 0). Err is set, and Allowed meaningless,
// for an error reply, whose text is Msg.
type Decision struct {
	Allowed int64
	Err     bool
	Msg     string
}

// readDecision reads one reply and keeps only its decision, without
// allocating: the first integer of an array, or an integer. A bulk string
// (an ECHO, see EchoDialect) is reported as Allowed 1; any other well-formed
// reply is skipped and reported as Allowed 0.
func readDecision(rd *bufio.Reader) (Decision, error) {
	l, err := respwire.ReadLine(rd, limits)
	if err != nil {
		return Decision{}, err
	}
	switch respwire.Kind(l[0]) {
	case respwire.Integer:
		n, ok := respwire.ParseInt(l[1:])
		if !ok {
			return Decision{}, fmt.Errorf("bad integer %q", l)
		}
		return Decision{Allowed: n}, nil
	case respwire.SimpleError:
		return Decision{Err: true, Msg: string(l[1:])}, nil
	case respwire.Array:
		n, ok := respwire.ParseInt(l[1:])
		if !ok || n < -1 {
			return Decision{}, fmt.Errorf("bad length %q", l)
		}
		if n <= 0 {
			return Decision{}, nil
		}
		first, err := readDecision(rd)
		for i := int64(1); i < n && err == nil; i++ {
			err = respwire.Skip(rd, limits)
		}
		return first, err
	}
	if err := respwire.SkipRest(rd, limits, l); err != nil {
		return Decision{}, err
	}
	if respwire.Kind(l[0]) == respwire.BulkString && !bytes.Equal(l, []byte("$-1")) {
		return Decision{Allowed: 1}, nil
	}
	return Decision{}, nil
}
