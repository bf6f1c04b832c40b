package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// The targets the tool knows how to start.
const (
	// TargetSluiceMem is one sluice node with --in-memory.
	TargetSluiceMem = "sluice-mem"
	// TargetSluiceDurable is one sluice node with a temporary --data-dir.
	TargetSluiceDurable = "sluice-durable"
	// TargetSluiceCluster is three durable sluice nodes forming a Raft
	// cluster (internal/testkit/proccluster); connections are spread over
	// the three.
	TargetSluiceCluster = "sluice-cluster"
	// TargetSluiceClusterLeader is the same cluster with every connection
	// on its leader, as a single redis-benchmark sends them.
	TargetSluiceClusterLeader = "sluice-cluster-leader"
	// TargetSluiceClusterShards3 is three durable sluice nodes with
	// --shards 3 (three Raft groups, each led by another node once
	// balanced), driven by a cluster-aware client: every request goes to
	// the leader of its key's group, as CLUSTER SLOTS names it.
	TargetSluiceClusterShards3 = "sluice-cluster-shards3"
	// TargetRedis is redis-server without persistence, running lua/*.lua.
	TargetRedis = "redis"
	// TargetRedisAnchor is the same redis-server running the anchor token
	// bucket script (token workloads only).
	TargetRedisAnchor = "redis-anchor"
	// TargetRedisEcho is the same redis-server answering ECHO key: a
	// server doing next to no work, so its throughput is the ceiling of
	// the load generator and the machine, which no limiter can pass.
	TargetRedisEcho = "redis-echo"
	// TargetRedisAOF is redis-server with appendonly yes and appendfsync
	// always: every write on disk before its reply, sluice's durability
	// promise on one machine, without replicas.
	TargetRedisAOF = "redis-aof"
)

// TargetNames lists every target, the durability targets last.
func TargetNames() []string {
	return append([]string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster, TargetSluiceClusterLeader, TargetSluiceClusterShards3, TargetRedis, TargetRedisAnchor, TargetRedisEcho, TargetRedisAOF},
		DurabilityTargets()...)
}

// ParseTarget checks a target name.
func ParseTarget(s string) (string, error) {
	if slices.Contains(TargetNames(), s) {
		return s, nil
	}
	return "", fmt.Errorf("unknown target %q (want one of %s)", s, strings.Join(TargetNames(), ", "))
}

// IsRedis reports whether a target is a redis-server one.
func IsRedis(name string) bool { return strings.HasPrefix(name, TargetRedis) }

// ServerConfig says where the servers' binaries are and where their files go.
type ServerConfig struct {
	SluiceBin    string        // path to the sluice binary
	RedisBin     string        // path to redis-server
	WorkDir      string        // parent of data directories (default: the system's temp dir)
	StartTimeout time.Duration // how long a server may take to answer (default 20s; a cluster gets twice that)
	Logger       *slog.Logger
}

func (c *ServerConfig) defaults() {
	if c.StartTimeout <= 0 {
		c.StartTimeout = 20 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// StartOptions vary one start.
type StartOptions struct {
	// Debug starts sluice with --enable-debug-command.
	Debug bool
	// LogStore and Fsync, when set, start sluice with --raft-log and
	// --fsync.
	LogStore, Fsync string
	// Shards, when above 1, starts a cluster with --shards.
	Shards int
}

// Target is a running server (or cluster) under test.
type Target struct {
	Name    string
	Addrs   []string // RESP addresses; loads spread connections over them
	Dialect Dialect
	// stop stops what the target owns (nil for a view on another
	// target's processes); pids and alive describe its processes.
	stop  func() error
	pids  func() []int
	alive func() error
	// metrics are the nodes' --metrics-addr (a cluster's): ops per log
	// entry are read from them.
	metrics []string
	// route, when set, routes every request to its key's master
	// (LoadOptions.Route).
	route *SlotRoute
	// cluster is a cluster target's harness.
	cluster *proccluster.Cluster
}

// PIDs are the target's process ids.
func (t *Target) PIDs() []int { return t.pids() }

// RSS is the resident set size of the target's processes, summed, in bytes
// (VmRSS in /proc/PID/status).
func (t *Target) RSS() (int64, error) {
	var sum int64
	for _, pid := range t.PIDs() {
		n, err := ReadRSS(pid)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// Do runs one command on the target's first address; an error reply is an
// error. ctx is checked first only: the exchange has its own deadline.
func (t *Target) Do(ctx context.Context, args ...string) (respwire.Value, error) {
	if err := ctx.Err(); err != nil {
		return respwire.Value{}, err
	}
	return doAt(t.Addrs[0], args...)
}

// Flush forgets every key (FLUSHALL).
func (t *Target) Flush(ctx context.Context) error {
	if _, err := t.Do(ctx, "FLUSHALL"); err != nil {
		return fmt.Errorf("%s: FLUSHALL: %w", t.Name, err)
	}
	return nil
}

// Alive reports an error if a process of the target has exited.
func (t *Target) Alive() error { return t.alive() }

// Stop stops the target's processes and removes its data directories.
func (t *Target) Stop() error {
	if t.stop == nil {
		return nil
	}
	err := t.stop()
	t.stop = nil
	return err
}

// view is a target sharing t's processes under another name and dialect.
func (t *Target) view(name string, d Dialect) *Target {
	v := *t
	v.Name, v.Dialect, v.stop = name, d, nil
	return &v
}

// tail is the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// StartTarget starts a fresh target. The caller stops it.
func StartTarget(ctx context.Context, cfg ServerConfig, name string, opt StartOptions) (*Target, error) {
	cfg.defaults()
	if store, fsync, ok := durabilityOf(name); ok {
		opt.LogStore, opt.Fsync = store, fsync
	}
	switch {
	case name == TargetSluiceMem, name == TargetSluiceDurable:
		return startSluiceSingle(ctx, cfg, name, opt)
	case name == TargetSluiceClusterShards3:
		opt.Shards = 3
		return startSluiceCluster(ctx, cfg, name, opt)
	case strings.HasPrefix(name, TargetSluiceCluster):
		return startSluiceCluster(ctx, cfg, name, opt)
	case name == TargetRedisAOF:
		return startRedis(ctx, cfg, name, "--appendonly", "yes", "--appendfsync", "always")
	case IsRedis(name):
		t, err := startRedis(ctx, cfg, TargetRedis)
		if err != nil || name == TargetRedis {
			return t, err
		}
		v := t.view(name, redisView(name))
		v.stop = t.stop
		return v, nil
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

// redisView is the dialect of a target that shares the redis server.
func redisView(name string) Dialect {
	if name == TargetRedisEcho {
		return EchoDialect{}
	}
	return LuaDialect{Anchor: true}
}

func checkBin(what, bin string) (string, error) {
	if bin == "" {
		return "", fmt.Errorf("%s: no binary given", what)
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%s binary %s: %w", what, bin, err)
	}
	return filepath.Abs(path)
}

// startProcess starts one server process with its output in dir/out.log
// and waits until probe succeeds on addr.
func startProcess(ctx context.Context, cfg ServerConfig, t *Target, bin string, args []string, dir, addr string, probe func(addr string) error) error {
	logPath := filepath.Join(dir, "out.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	p, err := sluiceproc.Start(t.Name, bin, args, sluiceproc.Options{Dir: dir, Output: logf, DieWithParent: true})
	if err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return err
	}
	t.stop = func() error {
		err := p.Stop(10 * time.Second)
		logf.Close()
		return errors.Join(err, os.RemoveAll(dir))
	}
	t.pids = func() []int { return []int{p.Pid()} }
	t.alive = func() error {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited: %v; last output: %s", t.Name, p.Err(), tail(logPath))
		default:
			return nil
		}
	}
	err = testkit.PollContext(ctx, cfg.StartTimeout, 50*time.Millisecond, func() error {
		if t.alive() != nil {
			return nil // no use waiting
		}
		return probe(addr)
	})
	if err == nil {
		err = t.alive()
	}
	if err != nil {
		t.Stop()
		return fmt.Errorf("%s not ready: %w", t.Name, err)
	}
	return nil
}

// limiterProbe succeeds when an RL.TOKEN call is decided (a node with a
// leader and a committed write), then removes the probe key.
func limiterProbe(addr string) error {
	v, err := doAt(addr, "RL.TOKEN", "bench:probe", "10", "1/s")
	if err != nil {
		return err
	}
	if _, ok := v.Ints(); !ok {
		return fmt.Errorf("RL.TOKEN replied %v", v)
	}
	_, err = doAt(addr, "DEL", "bench:probe")
	return err
}

func pingProbe(addr string) error {
	_, err := doAt(addr, "PING")
	return err
}

// sluiceArgs are the flags every sluice node of a target takes.
func sluiceArgs(opt StartOptions) []string {
	args := []string{"--log-level", "warn"}
	if opt.LogStore != "" {
		args = append(args, "--raft-log", opt.LogStore)
	}
	if opt.Fsync != "" {
		args = append(args, "--fsync", opt.Fsync)
	}
	if opt.Debug {
		args = append(args, "--enable-debug-command")
	}
	return args
}

func startSluiceSingle(ctx context.Context, cfg ServerConfig, name string, opt StartOptions) (*Target, error) {
	bin, err := checkBin("sluice", cfg.SluiceBin)
	if err != nil {
		return nil, err
	}
	addr, err := sluiceproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-data-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	args := append([]string{"--addr", addr}, sluiceArgs(opt)...)
	if name == TargetSluiceMem {
		args = append(args, "--in-memory")
	} else {
		args = append(args, "--data-dir", filepath.Join(dir, "data"))
	}
	t := &Target{Name: name, Addrs: []string{addr}, Dialect: SluiceDialect{}}
	return t, startProcess(ctx, cfg, t, bin, args, dir, addr, limiterProbe)
}

// startSluiceCluster starts three durable nodes (proccluster) and waits
// until every group serves at the newest cluster version. A -leader target
// keeps only the leader's address; a sharded one routes by slot.
func startSluiceCluster(ctx context.Context, cfg ServerConfig, name string, opt StartOptions) (*Target, error) {
	bin, err := checkBin("sluice", cfg.SluiceBin)
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-cluster-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	t := &Target{Name: name, Dialect: SluiceDialect{}}
	c, err := proccluster.New(proccluster.Config{Bin: bin, Nodes: 3, Shards: opt.Shards, DataDir: base,
		Flags: sluiceArgs(opt), DieWithParent: true, Setup: func(nodes []*proccluster.Node) {
			for _, n := range nodes {
				if m, err := sluiceproc.FreeAddr(); err == nil {
					n.Extra = append(n.Extra, "--metrics-addr", m)
					t.metrics = append(t.metrics, m)
				}
			}
		}})
	if err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	t.cluster = c
	t.stop = func() error {
		c.Close()
		return os.RemoveAll(base)
	}
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
	if err := clusterReady(ctx, cfg, t, c, opt); err != nil {
		t.Stop()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return t, nil
}

func clusterReady(ctx context.Context, cfg ServerConfig, t *Target, c *proccluster.Cluster, opt StartOptions) error {
	timeout := 2 * cfg.StartTimeout
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
		for g := range max(opt.Shards, 1) {
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
	case opt.Shards > 1:
		// Wait for the leaders to spread (one group per node), then route.
		r, err := waitClusterRoute(ctx, t.Addrs[0], min(opt.Shards, len(t.Addrs)), timeout)
		if err != nil {
			return err
		}
		t.route, t.Addrs = r, r.Addrs
	case t.Name != TargetSluiceCluster: // the leader targets
		return t.onLeader(ctx)
	}
	return nil
}

// onLeader keeps only the address of group 0's leader.
func (t *Target) onLeader(ctx context.Context) error {
	leader, err := t.cluster.Leader(ctx, 0, 20*time.Second)
	if err != nil {
		return err
	}
	t.Addrs = []string{leader.RESP}
	return nil
}

// startRedis starts a redis-server without persistence, or with the
// persistence arguments given (which replace --appendonly no), and loads
// the scripts.
func startRedis(ctx context.Context, cfg ServerConfig, name string, persist ...string) (*Target, error) {
	bin, err := checkBin("redis-server", cfg.RedisBin)
	if err != nil {
		return nil, err
	}
	addr, err := sluiceproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	if len(persist) == 0 {
		persist = []string{"--appendonly", "no"}
	}
	_, port, _ := strings.Cut(addr, ":")
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning"}, persist...)
	t := &Target{Name: name, Addrs: []string{addr}, Dialect: LuaDialect{}}
	if err := startProcess(ctx, cfg, t, bin, args, dir, addr, pingProbe); err != nil {
		return nil, err
	}
	if err := LoadScripts(addr); err != nil {
		t.Stop()
		return nil, err
	}
	return t, nil
}

// RedisVersion is what `redis-server --version` prints, shortened.
func RedisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	s := string(bytes.TrimSpace(out))
	if f := strings.Fields(s); len(f) >= 3 {
		return strings.TrimPrefix(f[2], "v=")
	}
	return s
}

// Env starts targets on first use and keeps them for the whole suite, so
// that rounds can alternate between them. A target that fails to start is
// remembered as unavailable with its reason.
type Env struct {
	cfg     ServerConfig
	mu      sync.Mutex
	targets map[string]*Target
	errs    map[string]error
}

// NewEnv returns an Env that starts servers as cfg says.
func NewEnv(cfg ServerConfig) *Env {
	cfg.defaults()
	return &Env{cfg: cfg, targets: map[string]*Target{}, errs: map[string]error{}}
}

// Config is the Env's server configuration.
func (e *Env) Config() ServerConfig { return e.cfg }

// Get returns the running target, starting it on first use. The redis
// views share one redis-server.
func (e *Env) Get(ctx context.Context, name string) (*Target, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.get(ctx, name)
}

func (e *Env) get(ctx context.Context, name string) (*Target, error) {
	if t, ok := e.targets[name]; ok {
		return t, t.Alive()
	}
	if err, ok := e.errs[name]; ok {
		return nil, err
	}
	var t *Target
	var err error
	switch name {
	case TargetRedisAnchor, TargetRedisEcho:
		if t, err = e.get(ctx, TargetRedis); err == nil {
			t = t.view(name, redisView(name))
		}
	case TargetSluiceClusterLeader: // a view on the cluster target
		if t, err = e.get(ctx, TargetSluiceCluster); err == nil {
			t = t.view(name, t.Dialect)
			err = t.onLeader(ctx)
		}
	default:
		e.cfg.Logger.Info("starting target", "target", name)
		t, err = StartTarget(ctx, e.cfg, name, StartOptions{})
	}
	if err != nil {
		e.cfg.Logger.Warn("target unavailable", "target", name, "err", err)
		e.errs[name] = err
		return nil, err
	}
	e.targets[name] = t
	return t, nil
}

// SluiceVersion is the sluice_version of INFO server of a sluice target the
// Env has running, with the binary's path and modification time; empty when
// none runs.
func (e *Env) SluiceVersion(ctx context.Context) string {
	e.mu.Lock()
	var t *Target
	for _, name := range []string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster} {
		if t = e.targets[name]; t != nil {
			break
		}
	}
	e.mu.Unlock()
	if t == nil {
		return ""
	}
	version := "unknown"
	if v, err := t.Do(ctx, "INFO", "server"); err == nil {
		if _, rest, ok := strings.Cut(v.Str, "sluice_version:"); ok {
			version = strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
		}
	}
	if fi, err := os.Stat(e.cfg.SluiceBin); err == nil {
		version += fmt.Sprintf(" (%s, built %s)", e.cfg.SluiceBin, fi.ModTime().UTC().Format("2006-01-02 15:04 MST"))
	}
	return version
}

// Close stops every target started.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for name, t := range e.targets {
		if err := t.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		delete(e.targets, name)
	}
	return errors.Join(errs...)
}
