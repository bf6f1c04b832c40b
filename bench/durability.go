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

// logCounters sums, over a cluster's nodes, the log entries committed as
// leader and the operations they carried (sluice_raft_committed_entries_total
// and sluice_raft_committed_ops_total on each node's /metrics): the
// difference over a run gives ops per log entry, whichever node led.
func logCounters(ctx context.Context, metricsAddrs []string) (entries, ops float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, addr := range metricsAddrs {
		e, o, err := scrapeCommitted(ctx, addr)
		if err != nil {
			return 0, 0, err
		}
		entries += e
		ops += o
	}
	return entries, ops, nil
}

func scrapeCommitted(ctx context.Context, addr string) (entries, ops float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("metrics of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("metrics of %s: %s", addr, resp.Status)
	}
	return parseCommitted(bufio.NewScanner(resp.Body))
}

// parseCommitted reads the two counters from Prometheus's text format.
func parseCommitted(sc *bufio.Scanner) (entries, ops float64, err error) {
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
			dst = &entries
		case "sluice_raft_committed_ops_total":
			dst = &ops
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("metrics: %s: %w", name, err)
		}
		*dst += v
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("metrics: %w", err)
	}
	if found < 2 {
		return 0, 0, fmt.Errorf("metrics: no sluice_raft_committed_* counters")
	}
	return entries, ops, nil
}
