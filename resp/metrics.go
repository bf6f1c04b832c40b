package resp

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/engine"
)

// Metrics. The server owns its metrics (nothing is registered globally);
// the process registers Server.Collector() in its registry, and INFO reads
// the same counters, so the two never disagree.
//
// Labels are bounded: command takes the names of the command table (a
// subcommand counts under its container, an unknown command as "other"),
// result takes allowed, denied or error. No label ever carries a key.
//
// The hot path allocates nothing for metrics: every command's counters are
// resolved once, when the server is built, and a connection tallies its
// pipeline's commands in a scratch slice, then adds each command's counts
// once per pipeline.

// otherCommand labels the commands that are not in the table.
const otherCommand = "other"

// cmdStats are one command's resolved metric children.
type cmdStats struct {
	name     string
	decision bool // an RL.* limiter command or CL.THROTTLE
	calls    prometheus.Counter
	failed   prometheus.Counter
	latency  prometheus.Histogram
	// Decision commands only.
	allowed, denied, errored prometheus.Counter
}

// serverMetrics are a server's metrics.
type serverMetrics struct {
	commands  *prometheus.CounterVec
	failed    *prometheus.CounterVec
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	oom       prometheus.Counter
	byName    map[string]*cmdStats
	other     *cmdStats
	all       []prometheus.Collector // every collector above, and the gauges read when collected
}

func newServerMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_commands_total",
			Help: "Commands processed, by command name.",
		}, []string{"command"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_command_errors_total",
			Help: "Commands that replied an error, by command name.",
		}, []string{"command"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions (RL.* limiter commands and CL.THROTTLE) by command and result: allowed, denied or error.",
		}, []string{"command", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_command_duration_seconds",
			Help: "Time from reading a pipeline to rendering its replies (commit included), observed once per command name per pipeline.",
			// 25µs .. 1.5s
			Buckets: prometheus.ExponentialBuckets(25e-6, 2.5, 13),
		}, []string{"command"}),
		oom: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_oom_rejections_total",
			Help: "Commands refused because creating a key would pass --max-keys or --maxmemory.",
		}),
		byName: make(map[string]*cmdStats),
	}
	for _, cmd := range s.commands {
		st := m.stats(cmd.name, cmd.decision)
		cmd.stats = st
		for _, sub := range cmd.subs {
			sub.stats = st
		}
	}
	m.other = m.stats(otherCommand, false)

	m.all = []prometheus.Collector{
		m.commands, m.failed, m.decisions, m.latency, m.oom,
		gaugeFunc("sluice_connected_clients", "Client connections open now.",
			func() float64 { return float64(s.connected.Load()) }),
		counterFunc("sluice_connections_received_total", "Client connections accepted, refused ones included.",
			func() float64 { return float64(s.connsTotal.Load()) }),
		counterFunc("sluice_rejected_connections_total", "Client connections refused past --maxclients.",
			func() float64 { return float64(s.rejectedConns.Load()) }),
		gaugeFunc("sluice_maxclients", "The --maxclients limit.",
			func() float64 { return float64(s.cfg.MaxClients) }),
	}
	if s.cfg.Scripts != nil {
		m.all = append(m.all, s.cfg.Scripts) // scripts.go
	}
	if eng := s.cfg.Engine; eng != nil {
		maxKeys, maxBytes := eng.Limits()
		m.all = append(m.all,
			gaugeFunc("sluice_keys", "Keys holding limiter state (keys back at their initial state count until reclaimed, within about 100 ms).",
				func() float64 { return float64(eng.Len()) }),
			gaugeFunc("sluice_engine_memory_bytes", "The engine's accounted memory: entries, index, long keys, log timestamps, rules (what --maxmemory limits).",
				func() float64 { return float64(eng.MemoryBytes()) }),
			gaugeFunc("sluice_max_keys", "The --max-keys limit (0: none).",
				func() float64 { return float64(maxKeys) }),
			gaugeFunc("sluice_maxmemory_bytes", "The --maxmemory limit in bytes (0: none).",
				func() float64 { return float64(maxBytes) }),
		)
	}
	return m
}

// gaugeFunc is a gauge read from f when collected.
func gaugeFunc(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// counterFunc is a counter read from f when collected.
func counterFunc(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
}

// stats resolves (once) the metric children of command name.
func (m *serverMetrics) stats(name string, decision bool) *cmdStats {
	if st, ok := m.byName[name]; ok {
		return st
	}
	st := &cmdStats{
		name:     name,
		decision: decision,
		calls:    m.commands.WithLabelValues(name),
		failed:   m.failed.WithLabelValues(name),
		latency:  m.latency.WithLabelValues(name).(prometheus.Histogram),
	}
	if decision {
		st.allowed = m.decisions.WithLabelValues(name, "allowed")
		st.denied = m.decisions.WithLabelValues(name, "denied")
		st.errored = m.decisions.WithLabelValues(name, "error")
	}
	m.byName[name] = st
	return st
}

// Collector returns the server's metrics for a registry: commands,
// decisions, latency, clients, and the engine's keys and memory when
// Config.Engine is set.
func (s *Server) Collector() prometheus.Collector { return s.metrics }

// Describe implements prometheus.Collector.
func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

// tally is one command's counts within a pipeline.
type tally struct {
	st                                           *cmdStats
	calls, failed, allowed, denied, errored, oom uint32
}

// count adds pending command p's outcome to the connection's tallies. It
// runs after p's reply was rendered; execErr is the batch's error.
func (c *client) count(p *pending, execErr error) {
	st := p.stats
	if st == nil {
		return
	}
	var t *tally
	for i := range c.tallies {
		if c.tallies[i].st == st {
			t = &c.tallies[i]
			break
		}
	}
	if t == nil {
		c.tallies = append(c.tallies, tally{st: st})
		t = &c.tallies[len(c.tallies)-1]
	}
	t.calls++
	failed := false
	var err error
	switch {
	case !p.deferred:
		failed = p.localEnd > p.localStart && c.local.b[p.localStart] == '-'
	case execErr != nil:
		failed, err = true, execErr
	default:
		for i := p.opStart; i < p.opEnd; i++ {
			if e := c.results[i].Err; e != nil {
				failed, err = true, e
				break
			}
		}
	}
	if failed {
		t.failed++
		if err != nil && (errors.Is(err, engine.ErrOOM) || errors.Is(err, engine.ErrKeyLimit)) {
			t.oom++
		}
	}
	if !st.decision {
		return
	}
	switch {
	case failed:
		t.errored++
	case p.opEnd > p.opStart && c.results[p.opStart].Allowed:
		t.allowed++
	default:
		t.denied++
	}
}

// flushTallies adds the pipeline's tallies to the metrics and observes its
// duration once per command.
func (s *Server) flushTallies(c *client, d time.Duration) {
	secs := d.Seconds()
	for i := range c.tallies {
		t := &c.tallies[i]
		st := t.st
		st.calls.Add(float64(t.calls))
		st.latency.Observe(secs)
		addCount(st.failed, t.failed)
		addCount(s.metrics.oom, t.oom)
		if st.decision {
			addCount(st.allowed, t.allowed)
			addCount(st.denied, t.denied)
			addCount(st.errored, t.errored)
		}
		*t = tally{}
	}
	c.tallies = c.tallies[:0]
}

// addCount adds n to c unless n is 0 (a counter's Add is an atomic
// operation on a shared cache line: skipped when there is nothing to add).
func addCount(c prometheus.Counter, n uint32) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// counterValue reads a counter (for INFO).
func counterValue(c prometheus.Counter) int64 {
	var m dto.Metric
	if c == nil || c.Write(&m) != nil {
		return 0
	}
	return int64(m.GetCounter().GetValue())
}

// histogramSum reads a histogram's sum of observations (for INFO).
func histogramSum(h prometheus.Histogram) float64 {
	var m dto.Metric
	if h.Write(&m) != nil {
		return 0
	}
	return m.GetHistogram().GetSampleSum()
}
