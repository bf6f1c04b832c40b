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

// startSluice starts a sluice target through proccluster: sluice-mem and
// sluice-durable are one standalone node (--in-memory, or a temporary
// --data-dir), the others three durable nodes; a durability target
// (sluice-cluster-leader-<store>-<mode>) starts them with --raft-log
// <store> --fsync <mode> and keeps only the leader's address. Each node
// gets a --metrics-addr (the group commit figures). It waits until every
// node serves (at the newest cluster version, unless in memory).
func startSluice(ctx context.Context, cfg ServerConfig, name string) (*Target, error) {
	bin, err := checkBin("sluice", cfg.SluiceBin)
	if err != nil {
		return nil, err
	}
	flags, nodes, timeout := []string{"--log-level", "warn"}, 3, 2*cfg.StartTimeout
	if name == TargetSluiceMem || name == TargetSluiceDurable {
		nodes, timeout = 1, cfg.StartTimeout
	}
	if name == TargetSluiceMem {
		flags = append(flags, "--in-memory")
	}
	if store, fsync, ok := durabilityOf(name); ok {
		flags = append(flags, "--raft-log", store, "--fsync", fsync)
	}
	base, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	t := &Target{Name: name, Dialect: SluiceDialect}
	c, err := proccluster.New(proccluster.Config{Bin: bin, Nodes: nodes, Standalone: nodes == 1, DataDir: base, Flags: flags, DieWithParent: true,
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
	if err := sluiceReady(ctx, timeout, t, c); err != nil {
		return nil, errors.Join(fmt.Errorf("%s not ready: %w", name, err), t.Stop())
	}
	return t, nil
}

func sluiceReady(ctx context.Context, timeout time.Duration, t *Target, c *proccluster.Cluster) error {
	if err := c.StartAll(); err != nil {
		return err
	}
	if err := c.WaitServing(ctx, timeout, 2*time.Second); err != nil {
		return errors.Join(err, t.Alive())
	}
	// A new cluster starts at cluster version 1 and its leaders raise it
	// within a second or two; until then later commands are refused.
	for _, n := range c.Nodes {
		if t.Addrs = append(t.Addrs, n.RESP); t.Name == TargetSluiceMem {
			continue // no Raft, no RAFT.STATUS
		}
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
	if t.Name != TargetSluiceCluster && len(c.Nodes) > 1 { // the leader targets
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

// readMetrics reads every node's /metrics page and adds up its counters
// (see parseMetrics).
func readMetrics(ctx context.Context, addrs []string) (map[string]float64, error) {
	m := map[string]float64{}
	for _, addr := range addrs {
		err := func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return parseMetrics(resp.Body, m)
		}()
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", addr, err)
		}
	}
	return m, nil
}

// parseMetrics adds a metrics page's (Prometheus's text format) counters
// and untyped values to m under their names, and its histograms' sums and
// counts as name_sum and name_count, adding up the series of several Raft
// groups. The two committed counters are required (older servers lack the
// histograms).
func parseMetrics(page io.Reader, m map[string]float64) error {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(page)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	for _, name := range []string{entries, ops} {
		if fams[name] == nil {
			return fmt.Errorf("metrics: no %s", name)
		}
	}
	for name, f := range fams {
		for _, x := range f.Metric {
			if h := x.GetHistogram(); h != nil {
				m[name+"_sum"] += h.GetSampleSum()
				m[name+"_count"] += float64(h.GetSampleCount())
			} else {
				m[name] += x.GetCounter().GetValue() + x.GetUntyped().GetValue() + x.GetGauge().GetValue()
			}
		}
	}
	return nil
}
