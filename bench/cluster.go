package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sluice-rl/sluice/internal/slots"
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
// --metrics-addr, and waits until every group serves at the newest cluster
// version. A -leader target keeps only the leader's address; a sharded one
// routes by slot.
func startSluiceCluster(ctx context.Context, cfg ServerConfig, name string, opt startOptions) (*Target, error) {
	bin, err := checkBin("sluice", cfg.SluiceBin)
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-cluster-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	t := &Target{Name: name, Dialect: SluiceDialect{}}
	c, err := proccluster.New(proccluster.Config{Bin: bin, Nodes: 3, Shards: opt.shards, DataDir: base, Flags: sluiceArgs(opt), DieWithParent: true,
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
	t.pids = func() []int {
		var pids []int
		for _, n := range c.Nodes {
			if p := n.Process(); p != nil {
				pids = append(pids, p.Pid())
			}
		}
		return pids
	}
	t.alive = func() error {
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
	if err := clusterReady(ctx, 2*cfg.StartTimeout, t, c, max(opt.shards, 1)); err != nil {
		return nil, errors.Join(fmt.Errorf("cluster: %w", err), t.Stop())
	}
	return t, nil
}

func clusterReady(ctx context.Context, timeout time.Duration, t *Target, c *proccluster.Cluster, groups int) error {
	if err := c.StartAll(); err != nil {
		return err
	}
	if err := c.WaitServing(ctx, timeout, 2*time.Second); err != nil {
		return errors.Join(err, t.alive())
	}
	// A new cluster starts at cluster version 1 and its leaders raise it
	// within a second or two; until then later commands are refused.
	for _, n := range c.Nodes {
		t.Addrs = append(t.Addrs, n.RESP)
		for g := range groups {
			err := testkit.PollContext(ctx, timeout, 50*time.Millisecond, func() error {
				st, err := proccluster.RaftStatus(n, g, 2*time.Second)
				if err == nil && st["cluster_version"] != st["cluster_version_supported"] {
					err = fmt.Errorf("%s group %d at cluster version %s of %s", n.ID, g, st["cluster_version"], st["cluster_version_supported"])
				}
				return err
			})
			if err != nil {
				return err
			}
		}
	}
	switch {
	case groups > 1: // wait for the leaders to spread (one group per node), then route
		err := testkit.PollContext(ctx, timeout, 100*time.Millisecond, func() error {
			r, err := ClusterRoute(ctx, t.Addrs[0])
			if err == nil && len(r.Addrs) != min(groups, len(t.Addrs)) {
				err = fmt.Errorf("%d distinct masters, want %d", len(r.Addrs), min(groups, len(t.Addrs)))
			}
			t.route = r
			return err
		})
		if err != nil {
			return fmt.Errorf("cluster route: %w", err)
		}
		t.Addrs = t.route.Addrs
	case t.Name != TargetSluiceCluster: // the leader targets
		return t.onLeader(ctx)
	}
	return nil
}

// SlotRoute sends each request to the node serving its key's hash slot, as
// a cluster-aware Redis client does (go-redis's ClusterClient, rueidis):
// learned once from CLUSTER SLOTS, each range's master.
type SlotRoute struct {
	Addrs []string           // the masters' RESP addresses
	node  [slots.Count]uint8 // node[slot] is the index in Addrs of the slot's master
}

// Node returns the index in Addrs of the master of key's slot.
func (r *SlotRoute) Node(key []byte) int { return int(r.node[slots.Of(key)]) }

// ClusterRoute asks the node at addr for CLUSTER SLOTS and returns the
// route it describes; every slot must have a master.
func ClusterRoute(ctx context.Context, addr string) (*SlotRoute, error) {
	v, err := doAt(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	r, covered := &SlotRoute{}, 0
	for _, rng := range v.Elems {
		if len(rng.Elems) < 3 || len(rng.Elems[2].Elems) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range %v", rng)
		}
		first, last, master := rng.Elems[0].Int, rng.Elems[1].Int, rng.Elems[2].Elems
		a := master[0].Str + ":" + strconv.FormatInt(master[1].Int, 10)
		if !slices.Contains(r.Addrs, a) {
			r.Addrs = append(r.Addrs, a)
		}
		if first < 0 || last >= slots.Count || first > last || len(r.Addrs) > 255 {
			return nil, fmt.Errorf("CLUSTER SLOTS: range %d-%d of master %d", first, last, len(r.Addrs))
		}
		for s := first; s <= last; s++ {
			r.node[s] = uint8(slices.Index(r.Addrs, a))
		}
		covered += int(last - first + 1)
	}
	if covered != slots.Count {
		return nil, fmt.Errorf("CLUSTER SLOTS covers %d of %d slots", covered, slots.Count)
	}
	return r, nil
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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var sum LogStats
	for _, addr := range metricsAddrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return LogStats{}, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return LogStats{}, fmt.Errorf("metrics of %s: %w", addr, err)
		}
		st, err := parseLogStats(resp.Body)
		resp.Body.Close()
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
