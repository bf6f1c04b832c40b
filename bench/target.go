package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// The targets the tool starts.
const (
	TargetSluiceMem     = "sluice-mem"     // one sluice node with --in-memory
	TargetSluiceDurable = "sluice-durable" // one sluice node with a temporary --data-dir
	// TargetSluiceCluster is three durable nodes (proccluster), the
	// connections spread over them; TargetSluiceClusterLeader the same
	// cluster with every connection on its leader, as a single
	// redis-benchmark sends them.
	TargetSluiceCluster       = "sluice-cluster"
	TargetSluiceClusterLeader = "sluice-cluster-leader"
	// TargetRedis is redis-server without persistence running lua/*.lua;
	// TargetRedisAnchor the same server running the anchor token bucket
	// (token workloads only); TargetRedisEcho the same server answering
	// ECHO key, next to no work: the ceiling of the load generator and the
	// machine; TargetRedisAOF redis-server with appendonly yes and
	// appendfsync always (every write on disk before its reply).
	TargetRedis       = "redis"
	TargetRedisAnchor = "redis-anchor"
	TargetRedisEcho   = "redis-echo"
	TargetRedisAOF    = "redis-aof"
)

// TargetNames lists every target, the durability targets last.
func TargetNames() []string {
	return append([]string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster, TargetSluiceClusterLeader,
		TargetRedis, TargetRedisAnchor, TargetRedisEcho, TargetRedisAOF}, DurabilityTargets()...)
}

// IsRedis reports whether a target is a redis-server one.
func IsRedis(name string) bool { return strings.HasPrefix(name, TargetRedis) }

// ServerConfig says where the servers' binaries are and where their files go.
type ServerConfig struct {
	SluiceBin    string        // path to the sluice binary
	RedisBin     string        // path to redis-server
	WorkDir      string        // parent of data directories (default: the system's temp dir)
	StartTimeout time.Duration // how long a server may take to answer (default 20s; a cluster gets twice that)
}

// Target is a running server (or cluster) under test. stop stops what it
// owns (nil for a view on another target's processes); metrics are a
// cluster's nodes' --metrics-addr (its group commit figures), leader finds
// its group 0 leader.
type Target struct {
	Name    string
	Addrs   []string // RESP addresses; loads spread connections over them
	Dialect Dialect
	PIDs    func() []int // the target's process ids
	Alive   func() error // an error if a process of the target has exited
	stop    func() error
	metrics []string
	leader  func(ctx context.Context) (string, error)
}

// Do runs one command on the target's first address; an error reply is an
// error. ctx is checked first only: the exchange has its own deadline.
func (t *Target) Do(ctx context.Context, args ...string) (respwire.Value, error) {
	if err := ctx.Err(); err != nil {
		return respwire.Value{}, err
	}
	return doAt(t.Addrs[0], args...)
}

// counters reads the target's counters (LoadOptions.Counters): its
// processes' CPU time and its nodes' metrics; what cannot be read is left
// out.
func (t *Target) counters(ctx context.Context) map[string]float64 {
	m, err := readMetrics(ctx, t.metrics)
	if err != nil {
		m = map[string]float64{}
	}
	if cpu, err := ProcessCPU(t.PIDs()); err == nil {
		m[serverCPU] = cpu
	}
	return m
}

// Stop stops the target's processes and removes its data directories.
func (t *Target) Stop() error {
	stop := t.stop
	if t.stop = nil; stop == nil {
		return nil
	}
	return stop()
}

// tail is the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
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

// StartTarget starts a fresh target: a server or a cluster of its own
// (the views on one, redis-anchor, redis-echo and sluice-cluster-leader,
// come from an Env). The caller stops it.
func StartTarget(ctx context.Context, cfg ServerConfig, name string) (*Target, error) {
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 20*time.Second)
	switch _, _, durability := durabilityOf(name); {
	case name == TargetRedis || name == TargetRedisAOF:
		return startRedis(ctx, cfg, name)
	case durability || slices.Contains([]string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster}, name):
		return startSluice(ctx, cfg, name)
	}
	return nil, fmt.Errorf("%q is not a target of its own", name)
}

// startRedis starts redis-server, without persistence or, for redis-aof,
// with every write on disk before its reply, and loads the scripts.
func startRedis(ctx context.Context, cfg ServerConfig, name string) (*Target, error) {
	bin, err := checkBin("redis-server", cfg.RedisBin)
	if err != nil {
		return nil, err
	}
	addr, err := sluiceproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	logPath := filepath.Join(dir, "out.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	_, port, _ := strings.Cut(addr, ":")
	persist := []string{"--appendonly", "no"}
	if name == TargetRedisAOF {
		persist = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", dir, "--daemonize", "no", "--loglevel", "warning"}, persist...)
	p, err := sluiceproc.Start(name, bin, args, sluiceproc.Options{Dir: dir, Output: logf, DieWithParent: true})
	if err != nil {
		logf.Close()
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	t := &Target{Name: name, Addrs: []string{addr}, Dialect: LuaDialect, PIDs: func() []int { return []int{p.Pid()} }}
	t.stop = func() error {
		err := p.Stop(10 * time.Second)
		logf.Close()
		return errors.Join(err, os.RemoveAll(dir))
	}
	t.Alive = func() error {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited: %v; last output: %s", name, p.Err(), tail(logPath))
		default:
			return nil
		}
	}
	err = testkit.PollContext(ctx, cfg.StartTimeout, 50*time.Millisecond, func() error {
		if t.Alive() != nil {
			return nil // no use waiting
		}
		return LoadScripts(addr)
	})
	if err = errors.Join(err, t.Alive()); err != nil {
		return nil, errors.Join(fmt.Errorf("%s not ready: %w", name, err), t.Stop())
	}
	return t, nil
}

// Env starts targets on first use and keeps them for the whole suite, so
// that rounds can alternate between them; the redis views share one
// redis-server, the leader view the cluster. A target that fails to start
// is remembered as unavailable with its reason.
type Env struct {
	cfg     ServerConfig
	targets map[string]*Target
	errs    map[string]error
}

// NewEnv returns an Env that starts servers as cfg says.
func NewEnv(cfg ServerConfig) *Env {
	return &Env{cfg: cfg, targets: map[string]*Target{}, errs: map[string]error{}}
}

// Get returns the running target, starting it on first use.
func (e *Env) Get(ctx context.Context, name string) (t *Target, err error) {
	if t, ok := e.targets[name]; ok {
		return t, t.Alive()
	}
	if err, ok := e.errs[name]; ok {
		return nil, err
	}
	// A view shares its base's processes under another name and dialect.
	view := func(base string, d Dialect) {
		if t, err = e.Get(ctx, base); err == nil {
			v := *t
			v.Name, v.stop = name, nil
			v.Dialect = cmp.Or(d, v.Dialect)
			t = &v
		}
	}
	switch name {
	case TargetRedisAnchor:
		view(TargetRedis, AnchorDialect)
	case TargetRedisEcho:
		view(TargetRedis, EchoDialect)
	case TargetSluiceClusterLeader:
		if view(TargetSluiceCluster, ""); err == nil {
			err = t.onLeader(ctx)
		}
	default:
		t, err = StartTarget(ctx, e.cfg, name)
	}
	if err != nil {
		e.errs[name] = err
		return nil, err
	}
	e.targets[name] = t
	return t, nil
}

// info is a section of the target's INFO, field by field.
func info(ctx context.Context, t *Target, section string) map[string]string {
	m := map[string]string{}
	if v, err := t.Do(ctx, "INFO", section); err == nil {
		for _, line := range strings.Split(v.Str, "\n") {
			if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				m[k] = val
			}
		}
	}
	return m
}

// Close stops every target started.
func (e *Env) Close() error {
	var errs []error
	for name, t := range e.targets {
		if err := t.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		delete(e.targets, name)
	}
	return errors.Join(errs...)
}
