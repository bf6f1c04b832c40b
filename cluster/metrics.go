package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics. A Node owns its metrics (nothing is registered globally): the
// process registers Node.Collector() in its registry. Raft's state is read
// when scraped; durations and forwarding are counted as they happen, with
// no label that grows with the keyspace.

// nodeMetrics are the metrics a node updates as it runs.
type nodeMetrics struct {
	apply       prometheus.Histogram // one FSM ApplyBatch call
	commit      prometheus.Histogram // raft.Apply of an entry to its outcome, leader only
	hold        prometheus.Histogram // an entry's first request gathered to raft.Apply
	snapCapture prometheus.Observer  // the copy on the FSM goroutine
	snapPersist prometheus.Observer  // encoding into the snapshot store
	snapshots   *prometheus.HistogramVec
	fwdBatches  prometheus.Counter
	fwdOps      prometheus.Counter
	// resolvedVec counts entries whose leadership was lost after Raft
	// appended them, by what their resolution found (commit.go, resolve).
	resolvedVec *prometheus.CounterVec
	// resentCached and resentLost count the re-sent forwarded batches
	// found applied already, answered from the reply cache or not
	// (dedup.go).
	resentCached, resentLost prometheus.Counter
	resentVec                *prometheus.CounterVec
}

func newNodeMetrics() *nodeMetrics {
	m := &nodeMetrics{
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_raft_apply_duration_seconds",
			Help:    "Time the state machine took to apply one batch of committed log entries.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10), // 5µs .. 1.3s
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_raft_commit_duration_seconds",
			Help: "Time from handing a log entry of commands to Raft until it committed on a majority and applied on this leader.",
			// 50µs .. 3.3s: a commit costs a log append on the leader and
			// a follower, in series, plus two network hops.
			Buckets: prometheus.ExponentialBuckets(5e-5, 2, 17),
		}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_batch_hold_duration_seconds",
			Help:    "Time an entry's first request waited in the leader's batcher before the entry went to Raft.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 20), // 5µs .. 2.6s
		}),
		snapshots: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_raft_snapshot_duration_seconds",
			Help:    "Time taken by snapshots: capture (stalls applies) and persist (encoding to the store).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10), // 100µs .. 26s
		}, []string{"phase"}),
		fwdBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_forwarded_batches_total",
			Help: "Batches (a client's pipeline) this node forwarded to the leader.",
		}),
		fwdOps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_forwarded_ops_total",
			Help: "Engine operations this node forwarded to the leader.",
		}),
	}
	m.resolvedVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_handover_resolved_entries_total",
		Help: "Entries this node handed to Raft as leader and lost the leadership of before they committed, by outcome learned from the log: applied (answered with their results), not_applied (routed again to the new leader) or unknown (answered UNCERTAIN).",
	}, []string{"outcome"})
	resent := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_forward_resent_applied_total",
		Help: "Re-sent forwarded batches (after a broken connection) that had applied already, by reply: cached (answered with the first copy's results) or lost (answered UNCERTAIN: this replica kept no reply).",
	}, []string{"reply"})
	m.resentVec = resent
	m.resentCached, m.resentLost = resent.WithLabelValues("cached"), resent.WithLabelValues("lost")
	m.snapCapture = m.snapshots.WithLabelValues("capture")
	m.snapPersist = m.snapshots.WithLabelValues("persist")
	return m
}

// committed records how long an entry took from raft.Apply to its outcome.
func (m *nodeMetrics) committed(d time.Duration) {
	if m != nil {
		m.commit.Observe(d.Seconds())
	}
}

// held records how long an entry's first request waited in the batcher.
func (m *nodeMetrics) held(d time.Duration) {
	if m != nil {
		m.hold.Observe(d.Seconds())
	}
}

// resolved counts one entry resolved after a leadership loss.
func (m *nodeMetrics) resolved(outcome int) {
	if m == nil {
		return
	}
	label := "unknown"
	switch outcome {
	case outcomeApplied:
		label = "applied"
	case outcomeNotApplied:
		label = "not_applied"
	}
	m.resolvedVec.WithLabelValues(label).Inc()
}

// resent counts a re-sent batch found applied, answered from the reply
// cache or not.
func (m *nodeMetrics) resent(cached bool) {
	switch {
	case m == nil:
	case cached:
		m.resentCached.Inc()
	default:
		m.resentLost.Inc()
	}
}

// forwarded counts one batch of ops sent to the leader.
func (m *nodeMetrics) forwarded(ops int) {
	if m != nil {
		m.fwdBatches.Inc()
		m.fwdOps.Add(float64(ops))
	}
}

var (
	descRaftState = prometheus.NewDesc("sluice_raft_state",
		"1 for this node's current Raft role (leader, follower, candidate, shutdown), 0 for the others.", []string{"state"}, nil)
	descRaftTerm = prometheus.NewDesc("sluice_raft_term",
		"Current Raft term.", nil, nil)
	descRaftCommit = prometheus.NewDesc("sluice_raft_commit_index",
		"Index of the latest log entry known to be committed.", nil, nil)
	descRaftApplied = prometheus.NewDesc("sluice_raft_applied_index",
		"Index of the latest log entry applied to the engine.", nil, nil)
	descRaftLastIndex = prometheus.NewDesc("sluice_raft_last_log_index",
		"Index of the latest entry in this node's log.", nil, nil)
	descRaftLastContact = prometheus.NewDesc("sluice_raft_last_contact_seconds",
		"Seconds since this follower last heard from the leader (0 on the leader, -1 never).", nil, nil)
	descRaftLeader = prometheus.NewDesc("sluice_raft_leader_known",
		"1 when this node knows a ready leader it can send commands to.", nil, nil)
	descRaftCommitted = prometheus.NewDesc("sluice_raft_committed_entries_total",
		"Log entries of commands this node committed as leader.", nil, nil)
	descRaftCommittedOps = prometheus.NewDesc("sluice_raft_committed_ops_total",
		"Engine operations carried by the entries this node committed as leader.", nil, nil)
	descApplyHalted = prometheus.NewDesc("sluice_raft_apply_halted",
		"1 when this node stopped applying the group's log at an entry it cannot apply (RAFT.STATUS apply_error says why): it serves the group no more.", nil, nil)
	descClusterVersion = prometheus.NewDesc("sluice_cluster_version",
		"The cluster version the group's log has reached.", nil, nil)
	descReplyCacheBytes = prometheus.NewDesc("sluice_forward_reply_cache_bytes",
		"About the memory the replies of recently applied forwarded batches take (kept to answer their re-sends; at most 32 MiB).", nil, nil)
	descReplyCacheBatches = prometheus.NewDesc("sluice_forward_reply_cache_batches",
		"Forwarded batches whose replies this replica keeps (for 15 s of log time at most).", nil, nil)
	descClusterVersionSupported = prometheus.NewDesc("sluice_cluster_version_supported",
		"The highest cluster version this binary supports.", nil, nil)
)

// nodeCollector reads a node's Raft state when scraped.
type nodeCollector struct{ n *Node }

// Collector returns the node's metrics (sluice_raft_*, forwarding), for the
// process's registry.
func (n *Node) Collector() prometheus.Collector { return nodeCollector{n} }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descRaftCommit, descRaftApplied,
		descRaftLastIndex, descRaftLastContact, descRaftLeader, descRaftCommitted, descRaftCommittedOps,
		descApplyHalted, descClusterVersion, descClusterVersionSupported, descReplyCacheBytes, descReplyCacheBatches} {
		ch <- d
	}
	m := c.n.metrics
	m.apply.Describe(ch)
	m.commit.Describe(ch)
	m.hold.Describe(ch)
	m.snapshots.Describe(ch)
	m.fwdBatches.Describe(ch)
	m.fwdOps.Describe(ch)
	m.resolvedVec.Describe(ch)
	m.resentVec.Describe(ch)
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	state := n.raft.State()
	for _, s := range []raft.RaftState{raft.Leader, raft.Follower, raft.Candidate, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, roleName(s))
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descRaftTerm, float64(n.raft.CurrentTerm()))
	gauge(descRaftCommit, float64(n.raft.CommitIndex()))
	gauge(descRaftApplied, float64(n.raft.AppliedIndex()))
	gauge(descRaftLastIndex, float64(n.raft.LastIndex()))
	contact := -1.0
	switch last := n.raft.LastContact(); {
	case state == raft.Leader:
		contact = 0
	case !last.IsZero():
		contact = time.Since(last).Seconds()
	}
	gauge(descRaftLastContact, contact)
	known := 0.0
	if kind := n.route().kind; kind == routeLocal || kind == routeForward {
		known = 1
	}
	gauge(descRaftLeader, known)
	halted := 0.0
	if n.fsm.halted() != nil {
		halted = 1
	}
	gauge(descApplyHalted, halted)
	gauge(descClusterVersion, float64(n.fsm.clusterVersion()))
	gauge(descClusterVersionSupported, float64(SupportedVersion))
	gauge(descReplyCacheBytes, float64(n.fsm.replies.bytes.Load()))
	gauge(descReplyCacheBatches, float64(n.fsm.replies.batches.Load()))
	entries, ops := n.commitStats()
	ch <- prometheus.MustNewConstMetric(descRaftCommitted, prometheus.CounterValue, float64(entries))
	ch <- prometheus.MustNewConstMetric(descRaftCommittedOps, prometheus.CounterValue, float64(ops))
	m := n.metrics
	m.apply.Collect(ch)
	m.commit.Collect(ch)
	m.hold.Collect(ch)
	m.snapshots.Collect(ch)
	m.fwdBatches.Collect(ch)
	m.fwdOps.Collect(ch)
	m.resolvedVec.Collect(ch)
	m.resentVec.Collect(ch)
}

// readyLag is how many committed entries a node may have left to apply and
// still call itself caught up.
const readyLag = 256

// versionSettle is how long after its start a node reports itself not
// ready while its group runs an older cluster version than it supports: a
// node joined to a cluster, or a cluster upgraded from an older release,
// waits for its leaders to raise the version (version.go; a cluster this
// release bootstrapped starts at its version), and until then the commands
// of later releases are refused, so a probe that waits for readiness (a
// load balancer, systemd, Kubernetes) should not send traffic yet. In a
// cluster that stays mixed (a rolling upgrade), the node is ready after
// versionSettle anyway.
const versionSettle = 5 * time.Second

// Ready reports whether the node can serve commands now (the /readyz
// probe): nil when a ready leader is known (this node or one it can forward
// to), the node has replayed its log, and it has applied nearly everything
// committed; otherwise an error saying why not.
func (n *Node) Ready() error {
	if err := n.stopped(); err != nil {
		return err
	}
	kind := n.route().kind
	if kind == routeWait && n.lead.transferring.Load() > 0 {
		kind = routeLocal // a transfer of ours holds commands a moment; it fails none
	}
	switch kind {
	case routeLocal, routeForward:
	case routeLoading:
		return ErrLoading
	default:
		return errors.New("no leader ready")
	}
	if !n.isReplayed() {
		return ErrLoading
	}
	if commit, applied := n.raft.CommitIndex(), n.raft.AppliedIndex(); commit > applied+readyLag {
		return fmt.Errorf("catching up: applied index %d, commit index %d", applied, commit)
	}
	if cv := n.gateVersion(); cv < SupportedVersion && time.Since(n.version.started) < versionSettle {
		return fmt.Errorf("cluster version %d: waiting up to %s for every member to support %d", cv, versionSettle, SupportedVersion)
	}
	return nil
}
