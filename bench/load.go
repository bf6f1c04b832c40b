package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// LoadOptions say how hard and how long to drive a server.
type LoadOptions struct {
	// Addrs are the server's RESP addresses; connection i goes to
	// Addrs[i % len(Addrs)].
	Addrs []string
	// Route, when set, replaces Addrs: every connection has one
	// connection to each master of the route, and sends each request to
	// its key's master (a cluster-aware client). A pipeline's requests are
	// split by master, written to each, then read. Only workloads of one
	// key per request can be routed.
	Route *SlotRoute
	// Conns is the number of connections, each driven by one goroutine.
	Conns int
	// Pipeline is the number of requests written at once on a connection
	// before its replies are read (redis-benchmark's -P).
	Pipeline int
	// Duration is how long the measured phase lasts, unless Requests is set.
	Duration time.Duration
	// Requests, when > 0, ends the measured phase after this many requests.
	Requests int64
	// Warmup runs the same load, unmeasured, before the measured phase.
	Warmup time.Duration
	// Seed makes the key sequence reproducible.
	Seed uint64
	// Timeout bounds one batch's round trip; a connection that exceeds it
	// fails (default 10s).
	Timeout time.Duration
	// ServerPIDs, if set, are the server's processes: their CPU time over
	// the measured phase is reported per request.
	ServerPIDs []int
	// LogCounters, if set, returns the server's group commit counters,
	// read at the start and the end of the measured phase for ops per log
	// entry and the mean commit and hold times.
	LogCounters func(context.Context) (LogStats, error)
}

// Validate checks the options and fills defaults.
func (o *LoadOptions) Validate() error {
	var errs []error
	if o.Route != nil {
		o.Addrs = o.Route.Addrs
	}
	if len(o.Addrs) == 0 {
		errs = append(errs, errors.New("no server address"))
	}
	if o.Conns < 1 {
		errs = append(errs, fmt.Errorf("conns: want at least 1, got %d", o.Conns))
	}
	if o.Pipeline < 1 {
		errs = append(errs, fmt.Errorf("pipeline: want at least 1, got %d", o.Pipeline))
	}
	if o.Duration <= 0 && o.Requests <= 0 {
		errs = append(errs, errors.New("want a duration or a request count"))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup: want >= 0, got %s", o.Warmup))
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	return errors.Join(errs...)
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
	// measured phase (0 when not measured).
	OpsPerEntry float64 `json:"ops_per_entry,omitempty"`
	// CommitTime is the mean time, in ns, from handing an entry to Raft to
	// its outcome on the leader; HoldTime the mean time an entry's first
	// request waited in the leader's batcher (0 when not measured).
	CommitTime float64   `json:"commit_ns_per_entry,omitempty"`
	HoldTime   float64   `json:"hold_ns_per_entry,omitempty"`
	Samples    Latencies `json:"-"` // every measured request's latency
}

// setLogStats sets the per-entry figures from the counters' difference
// over the measured phase.
func (res *LoadResult) setLogStats(d LogStats) {
	if d.Entries > 0 {
		res.OpsPerEntry = d.Ops / d.Entries
	}
	if d.Commits > 0 {
		res.CommitTime = d.CommitSeconds / d.Commits * 1e9
	}
	if d.Holds > 0 {
		res.HoldTime = d.HoldSeconds / d.Holds * 1e9
	}
}

// DenyShare is the measured share of denied requests among the answered.
func (r LoadResult) DenyShare() float64 {
	if r.Allowed+r.Denied == 0 {
		return 0
	}
	return float64(r.Denied) / float64(r.Allowed+r.Denied)
}

// load phases
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// worker is one connection's share of a run.
type worker struct {
	conns   []*respwire.Conn // one, or with LoadOptions.Route one per master
	gen     *requestGen
	lat     Latencies
	done    int64
	allowed int64
	denied  int64
	errs    int64
	firstEr string
	fail    error
}

// requestGen builds requests: it picks a key index, then the allowed or the
// exhausted twin of the key.
type requestGen struct {
	pick        KeyPicker
	rng         *rand.Rand
	deny        float64
	allow, dent Template
	aPrefix     string
	dPrefix     string
}

// next picks the next request: its template, key prefix and key index.
func (g *requestGen) next() (Template, string, uint64) {
	i := g.pick.Next()
	if g.deny > 0 && g.rng.Float64() < g.deny {
		return g.dent, g.dPrefix, i
	}
	return g.allow, g.aPrefix, i
}

// RunLoad drives a server with workload w spelled in dialect d.
func RunLoad(ctx context.Context, w Workload, d Dialect, o LoadOptions) (LoadResult, error) {
	if err := w.Validate(); err != nil {
		return LoadResult{}, fmt.Errorf("workload: %w", err)
	}
	if err := o.Validate(); err != nil {
		return LoadResult{}, fmt.Errorf("load options: %w", err)
	}
	allow, err := d.Template(w.Alg, w.Allow)
	if err != nil {
		return LoadResult{}, err
	}
	deny, err := d.Template(w.Alg, w.Deny)
	if err != nil {
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

	workers := make([]*worker, o.Conns)
	defer func() {
		for _, wk := range workers {
			if wk != nil {
				for _, c := range wk.conns {
					c.Close()
				}
			}
		}
	}()
	if o.Route != nil && !(allow.sameKey() && deny.sameKey()) {
		return LoadResult{}, errors.New("a routed load needs one key per request: this workload has layers")
	}
	for i := range workers {
		addrs := []string{o.Addrs[i%len(o.Addrs)]}
		if o.Route != nil {
			addrs = o.Route.Addrs
		}
		rng := rand.New(rand.NewPCG(o.Seed, uint64(i)+1))
		wk := &worker{gen: &requestGen{
			pick: NewKeyPicker(w.Dist, w.Keys, rng, zt), rng: rng, deny: w.DenyShare,
			allow: allow, dent: deny, aPrefix: w.AllowPrefix(), dPrefix: w.DenyPrefix(),
		}}
		workers[i] = wk
		for _, a := range addrs {
			c, err := dial(a)
			if err != nil {
				return LoadResult{}, fmt.Errorf("connection %d: %w", i, err)
			}
			wk.conns = append(wk.conns, c)
		}
	}

	var phase atomic.Int32
	var budget atomic.Int64 // requests left in the measured phase (request-count mode)
	budget.Store(o.Requests)
	if o.Warmup > 0 {
		phase.Store(phaseWarmup)
	} else {
		phase.Store(phaseMeasure)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk.run(runCtx, o, &phase, &budget)
		}()
	}
	// Closing the connections unblocks workers if the context ends early.
	stopWatch := context.AfterFunc(runCtx, func() {
		if ctx.Err() != nil {
			for _, wk := range workers {
				for _, c := range wk.conns {
					c.SetDeadline(time.Now())
				}
			}
		}
	})
	defer stopWatch()

	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	if o.Warmup > 0 {
		t := time.NewTimer(o.Warmup)
		select {
		case <-allDone:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		phase.Store(phaseMeasure)
	}
	start := time.Now()
	srvCPU0, srvErr := ProcessCPU(o.ServerPIDs)
	cliCPU0, _ := ProcessCPU([]int{os.Getpid()})
	var log0 LogStats
	logErr := errors.New("not measured")
	if o.LogCounters != nil {
		log0, logErr = o.LogCounters(ctx)
	}
	var end <-chan time.Time
	if o.Requests <= 0 {
		tm := time.NewTimer(o.Duration)
		defer tm.Stop()
		end = tm.C
	}
	select {
	case <-end:
	case <-allDone:
	case <-ctx.Done():
	}
	phase.Store(phaseStop)
	<-allDone
	elapsed := time.Since(start)
	srvCPU1, srvErr1 := ProcessCPU(o.ServerPIDs)
	cliCPU1, _ := ProcessCPU([]int{os.Getpid()})
	var log1 LogStats
	if logErr == nil {
		log1, logErr = o.LogCounters(ctx)
	}

	res := LoadResult{Elapsed: elapsed}
	var fails []error
	for i, wk := range workers {
		res.Samples.Merge(wk.lat)
		res.Requests += wk.done
		res.Allowed += wk.allowed
		res.Denied += wk.denied
		res.Errors += wk.errs
		if res.FirstError == "" && wk.firstEr != "" {
			res.FirstError = wk.firstEr
		}
		if wk.fail != nil {
			fails = append(fails, fmt.Errorf("connection %d: %w", i, wk.fail))
		}
	}
	if elapsed > 0 {
		res.Throughput = float64(res.Requests) / elapsed.Seconds()
	}
	res.Latency = res.Samples.Summary()
	if res.Requests > 0 {
		if len(o.ServerPIDs) > 0 && srvErr == nil && srvErr1 == nil {
			res.ServerCPU = (srvCPU1 - srvCPU0) * 1e9 / float64(res.Requests)
		}
		res.ClientCPU = (cliCPU1 - cliCPU0) * 1e9 / float64(res.Requests)
	}
	if logErr == nil {
		res.setLogStats(log1.sub(log0))
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("load: %w", err)
	}
	if len(fails) == len(workers) {
		return res, fmt.Errorf("every connection failed: %w", errors.Join(fails...))
	}
	if len(fails) > 0 {
		return res, fmt.Errorf("%d of %d connections failed: %w", len(fails), len(workers), fails[0])
	}
	return res, nil
}

// run drives one connection (with LoadOptions.Route, one per master) until
// the phase is stop or the budget is spent: each batch's requests are
// written to their masters' connections, then read master by master. Only
// batches sent in the measured phase count, so that every request counted
// was sent and answered between the start and the end of the phase.
func (wk *worker) run(ctx context.Context, o LoadOptions, phase *atomic.Int32, budget *atomic.Int64) {
	bufs := make([][]byte, len(wk.conns))
	counts := make([]int, len(wk.conns))
	var key []byte
	var lastDeadline time.Time
	for ctx.Err() == nil {
		ph, n := nextBatch(o, phase, budget)
		if n == 0 {
			return
		}
		for i := range bufs {
			bufs[i], counts[i] = bufs[i][:0], 0
		}
		for range n {
			t, prefix, i := wk.gen.next()
			m := 0
			if o.Route != nil {
				key = AppendKey(append(key[:0], prefix...), "", i)
				m = o.Route.Node(key)
			}
			bufs[m] = t.AppendIndex(bufs[m], prefix, i)
			counts[m]++
		}
		t0 := time.Now()
		renew := t0.Sub(lastDeadline) > o.Timeout/4 // renewing per batch costs a timer update
		if renew {
			lastDeadline = t0
		}
		for m, c := range wk.conns {
			if counts[m] == 0 {
				continue
			}
			if renew {
				_ = c.SetDeadline(t0.Add(o.Timeout))
			}
			c.AppendRaw(bufs[m])
			if err := c.Flush(); err != nil {
				wk.fail = err
				return
			}
		}
		for m, c := range wk.conns {
			if counts[m] > 0 && !wk.readReplies(c, counts[m], ph, t0) {
				return
			}
		}
		if ph == phaseMeasure {
			wk.done += int64(n)
		}
	}
}

// readReplies reads n decisions from c and, in the measured phase, records
// them; false when the connection failed (wk.fail says why).
func (wk *worker) readReplies(c *respwire.Conn, n int, ph int32, t0 time.Time) bool {
	extra := wk.gen.allow.extraReplies()
	for range n {
		for range extra {
			if err := respwire.Skip(c.Reader, limits); err != nil {
				wk.fail = err
				return false
			}
		}
		d, err := readDecision(c.Reader)
		if err != nil {
			wk.fail = err
			return false
		}
		if ph != phaseMeasure {
			continue
		}
		wk.lat.Record(int64(time.Since(t0)))
		switch {
		case d.Err:
			wk.errs++
			if wk.firstEr == "" {
				wk.firstEr = d.Msg
			}
		case d.Allowed == 1:
			wk.allowed++
		default:
			wk.denied++
		}
	}
	return true
}

// nextBatch returns the phase and how many requests the next batch sends:
// the pipeline depth, less at the end of a request budget; 0 when the
// phase is stop or the budget is spent.
func nextBatch(o LoadOptions, phase *atomic.Int32, budget *atomic.Int64) (int32, int) {
	ph := phase.Load()
	if ph == phaseStop {
		return ph, 0
	}
	p := o.Pipeline
	if ph == phaseMeasure && o.Requests > 0 {
		left := budget.Add(-int64(p))
		if left+int64(p) <= 0 {
			return ph, 0
		}
		if left < 0 {
			return ph, p + int(left)
		}
	}
	return ph, p
}

// Populate sends the request of template t once for every key
// prefix+index, index in [from, to), over conns pipelined connections, and
// fails on any error reply. The suite uses it to create live keys (memory)
// and to use up the limits of the keys a workload's denied share goes to.
func Populate(ctx context.Context, addrs []string, t Template, prefix string, from, to uint64, conns int) error {
	if to <= from {
		return nil
	}
	const batch = 256
	conns = max(1, min(conns, int((to-from+batch-1)/batch)))
	var next atomic.Uint64
	next.Store(from)
	errc := make(chan error, conns)
	for i := range conns {
		go func() {
			errc <- populateConn(ctx, addrs[i%len(addrs)], t, prefix, &next, to, batch)
		}()
	}
	var errs []error
	for range conns {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("populate %s[%d,%d): %w", prefix, from, to, errors.Join(errs...))
	}
	return nil
}

func populateConn(ctx context.Context, addr string, t Template, prefix string, next *atomic.Uint64, to uint64, batch uint64) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	var buf []byte
	for {
		lo := next.Add(batch) - batch
		if lo >= to {
			return ctx.Err()
		}
		hi := min(lo+batch, to)
		buf = buf[:0]
		for i := lo; i < hi; i++ {
			buf = t.AppendIndex(buf, prefix, i)
		}
		c.AppendRaw(buf)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if err := c.Flush(); err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			d, err := readDecision(c.Reader)
			if err != nil {
				return err
			}
			if d.Err {
				return errors.New(d.Msg)
			}
		}
	}
}
