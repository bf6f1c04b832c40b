package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// The durability targets: the durable three-node cluster with every
// connection on its leader, started with --raft-log <store> --fsync
// <mode>, e.g. sluice-cluster-leader-wal-everysec.
var (
	logStores   = []string{"bolt", "wal"}
	fsyncModes  = []string{"always", "everysec", "no"}
	durabilityP = TargetSluiceClusterLeader + "-"
)

// DurabilityTargets lists the durability targets: each log store in each
// durability mode.
func DurabilityTargets() []string {
	var out []string
	for _, s := range logStores {
		for _, f := range fsyncModes {
			out = append(out, durabilityP+s+"-"+f)
		}
	}
	return out
}

// durabilityOf parses a durability target's name.
func durabilityOf(name string) (store, fsync string, ok bool) {
	rest, _ := strings.CutPrefix(name, durabilityP)
	store, fsync, _ = strings.Cut(rest, "-")
	return store, fsync, slices.Contains(DurabilityTargets(), name)
}

// startSluiceCluster starts three durable nodes (proccluster), each with a
// --metrics-addr, and waits until they serve at the newest cluster version.
// A durability target (sluice-cluster-leader-<store>-<mode>) starts them
// with --raft-log <store> --fsync <mode> and keeps only the leader's
// address.
func startSluiceCluster(ctx context.Context, cfg ServerConfig, name string) (*Target, error) {
	bin, err := checkBin("sluice", cfg.SluiceBin)
	if err != nil {
		return nil, err
	}
	flags := []string{"--log-level", "warn"}
	if store, fsync, ok := durabilityOf(name); ok {
		flags = append(flags, "--raft-log", store, "--fsync", fsync)
	}
	base, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-cluster-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	t := &Target{Name: name, Dialect: SluiceDialect{}}
	c, err := proccluster.New(proccluster.Config{Bin: bin, Nodes: 3, DataDir: base, Flags: flags, DieWithParent: true,
		Setup: func(nodes []*proccluster.Node) {
			for _, n := range nodes {
				if m, err := sluiceproc.FreeAddr(); err == nil {
					n.Extra = append(n.Extra, "--metrics-addr", m)
					t.metrics = append(t.metrics, m)
				}
			}
		}})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(base))
	}
	t.stop = func() error { c.Close(); return os.RemoveAll(base) }
	t.PIDs = func() []int {
		var pids []int
		for _, n := range c.Nodes {
			if p := n.Process(); p != nil {
				pids = append(pids, p.Pid())
			}
		}
		return pids
	}
	t.Alive = func() error {
		for _, n := range c.Nodes {
			if cr := n.Crashes(); len(cr) > 0 {
				return fmt.Errorf("%s; last output: %s", cr[0], tail(n.LogPath))
			}
		}
		return nil
	}
	t.leader = func(ctx context.Context) (string, error) {
		n, err := c.Leader(ctx, 0, 20*time.Second)
		if err != nil {
			return "", err
		}
		return n.RESP, nil
	}
	if err := clusterReady(ctx, 2*cfg.StartTimeout, t, c); err != nil {
		return nil, errors.Join(fmt.Errorf("cluster: %w", err), t.Stop())
	}
	return t, nil
}

func clusterReady(ctx context.Context, timeout time.Duration, t *Target, c *proccluster.Cluster) error {
	if err := c.StartAll(); err != nil {
		return err
	}
	if err := c.WaitServing(ctx, timeout, 2*time.Second); err != nil {
		return errors.Join(err, t.Alive())
	}
	// A new cluster starts at cluster version 1 and its leaders raise it
	// within a second or two; until then later commands are refused.
	for _, n := range c.Nodes {
		t.Addrs = append(t.Addrs, n.RESP)
		err := testkit.PollContext(ctx, timeout, 50*time.Millisecond, func() error {
			st, err := proccluster.RaftStatus(n, 0, 2*time.Second)
			if err == nil && st["cluster_version"] != st["cluster_version_supported"] {
				err = fmt.Errorf("%s at cluster version %s of %s", n.ID, st["cluster_version"], st["cluster_version_supported"])
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	if t.Name != TargetSluiceCluster { // the leader targets
		return t.onLeader(ctx)
	}
	return nil
}

// onLeader keeps only the address of a cluster's group 0 leader.
func (t *Target) onLeader(ctx context.Context) error {
	addr, err := t.leader(ctx)
	t.Addrs = []string{addr}
	return err
}

// LogStats are a cluster's group commit counters, summed over its nodes
// (each node counts what it did as leader, so the sum holds whichever node
// led): the difference of two readings describes the entries committed in
// between.
type LogStats struct {
	Entries       float64 // sluice_raft_committed_entries_total
	Ops           float64 // sluice_raft_committed_ops_total
	CommitSeconds float64 // sluice_raft_commit_duration_seconds: sum
	Commits       float64 // and count
	HoldSeconds   float64 // sluice_batch_hold_duration_seconds: sum
	Holds         float64 // and count
}

// sub returns s minus an earlier reading.
func (s LogStats) sub(b LogStats) LogStats {
	return LogStats{s.Entries - b.Entries, s.Ops - b.Ops, s.CommitSeconds - b.CommitSeconds, s.Commits - b.Commits, s.HoldSeconds - b.HoldSeconds, s.Holds - b.Holds}
}

// logCounters reads the group commit counters of every node's /metrics
// and sums them.
func logCounters(ctx context.Context, metricsAddrs []string) (LogStats, error) {
	var sum LogStats
	for _, addr := range metricsAddrs {
		st, err := func() (LogStats, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
			if err != nil {
				return LogStats{}, err
			}
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				return LogStats{}, err
			}
			defer resp.Body.Close()
			return parseLogStats(resp.Body)
		}()
		if err != nil {
			return LogStats{}, fmt.Errorf("metrics of %s: %w", addr, err)
		}
		sum = sum.sub(LogStats{}.sub(st)) // sum + st
	}
	return sum, nil
}

// parseLogStats reads the group commit counters from a metrics page
// (Prometheus's text format), adding up the series of several Raft groups.
// The two committed counters are required; the commit and hold histograms
// are read when present (older servers lack them).
func parseLogStats(page io.Reader) (LogStats, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(page)
	if err != nil {
		return LogStats{}, fmt.Errorf("metrics: %w", err)
	}
	var st LogStats
	for name, dst := range map[string]*float64{"sluice_raft_committed_entries_total": &st.Entries, "sluice_raft_committed_ops_total": &st.Ops} {
		if fams[name] == nil {
			return LogStats{}, fmt.Errorf("metrics: no %s", name)
		}
		for _, m := range fams[name].Metric {
			*dst += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
	}
	for name, dst := range map[string][2]*float64{"sluice_raft_commit_duration_seconds": {&st.CommitSeconds, &st.Commits},
		"sluice_batch_hold_duration_seconds": {&st.HoldSeconds, &st.Holds}} {
		for _, m := range fams[name].GetMetric() {
			*dst[0] += m.GetHistogram().GetSampleSum()
			*dst[1] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return st, nil
}
