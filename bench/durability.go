package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The log stores and durability modes the durability targets combine.
var (
	logStores     = []string{"bolt", "wal"}
	durabilityFsc = []string{"always", "everysec", "no"}
)

// durabilityPrefix starts the name of a durability target: the durable
// three-node cluster with every connection on its leader, started with
// --raft-log <store> --fsync <mode>, e.g. sluice-cluster-leader-wal-everysec.
const durabilityPrefix = TargetSluiceClusterLeader + "-"

// DurabilityTargets lists the durability targets: each log store in each
// durability mode.
func DurabilityTargets() []string {
	var out []string
	for _, s := range logStores {
		for _, f := range durabilityFsc {
			out = append(out, durabilityPrefix+s+"-"+f)
		}
	}
	return out
}

// durabilityOf parses a durability target's name.
func durabilityOf(name string) (store, fsync string, ok bool) {
	rest, found := strings.CutPrefix(name, durabilityPrefix)
	if !found {
		return "", "", false
	}
	store, fsync, found = strings.Cut(rest, "-")
	if !found {
		return "", "", false
	}
	for _, s := range logStores {
		for _, f := range durabilityFsc {
			if s == store && f == fsync {
				return store, fsync, true
			}
		}
	}
	return "", "", false
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
func (s LogStats) sub(before LogStats) LogStats {
	return LogStats{
		Entries: s.Entries - before.Entries, Ops: s.Ops - before.Ops,
		CommitSeconds: s.CommitSeconds - before.CommitSeconds, Commits: s.Commits - before.Commits,
		HoldSeconds: s.HoldSeconds - before.HoldSeconds, Holds: s.Holds - before.Holds,
	}
}

// logCounters reads the group commit counters of every node's /metrics
// and sums them.
func logCounters(ctx context.Context, metricsAddrs []string) (LogStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var sum LogStats
	for _, addr := range metricsAddrs {
		st, err := scrapeLogStats(ctx, addr)
		if err != nil {
			return LogStats{}, err
		}
		sum = sum.add(st)
	}
	return sum, nil
}

// add returns the sum of two nodes' counters.
func (s LogStats) add(o LogStats) LogStats {
	return LogStats{
		Entries: s.Entries + o.Entries, Ops: s.Ops + o.Ops,
		CommitSeconds: s.CommitSeconds + o.CommitSeconds, Commits: s.Commits + o.Commits,
		HoldSeconds: s.HoldSeconds + o.HoldSeconds, Holds: s.Holds + o.Holds,
	}
}

func scrapeLogStats(ctx context.Context, addr string) (LogStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return LogStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return LogStats{}, fmt.Errorf("metrics of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return LogStats{}, fmt.Errorf("metrics of %s: %s", addr, resp.Status)
	}
	return parseLogStats(resp.Body)
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
