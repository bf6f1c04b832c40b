package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
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
	return parseLogStats(bufio.NewScanner(resp.Body))
}

// parseLogStats reads the group commit counters from Prometheus's text
// format. The two committed counters are required; the commit and hold
// histograms are read when present (older servers lack them).
func parseLogStats(sc *bufio.Scanner) (LogStats, error) {
	var st LogStats
	found := 0
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		// A node with several Raft groups labels each group's counters:
		// they add up.
		name, _, _ = strings.Cut(name, "{")
		var dst *float64
		switch name {
		case "sluice_raft_committed_entries_total":
			dst = &st.Entries
			found++
		case "sluice_raft_committed_ops_total":
			dst = &st.Ops
			found++
		case "sluice_raft_commit_duration_seconds_sum":
			dst = &st.CommitSeconds
		case "sluice_raft_commit_duration_seconds_count":
			dst = &st.Commits
		case "sluice_batch_hold_duration_seconds_sum":
			dst = &st.HoldSeconds
		case "sluice_batch_hold_duration_seconds_count":
			dst = &st.Holds
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return LogStats{}, fmt.Errorf("metrics: %s: %w", name, err)
		}
		*dst += v
	}
	if err := sc.Err(); err != nil {
		return LogStats{}, fmt.Errorf("metrics: %w", err)
	}
	if found < 2 {
		return LogStats{}, fmt.Errorf("metrics: no sluice_raft_committed_* counters")
	}
	return st, nil
}
