package bench

import (
	"cmp"
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

// startOptions vary one start: --raft-log and --fsync.
type startOptions struct{ logStore, fsync string }

// Target is a running server (or cluster) under test.
type Target struct {
	Name    string
	Addrs   []string // RESP addresses; loads spread connections over them
	Dialect Dialect
	// stop stops what the target owns (nil for a view on another target's
	// processes); pids and alive describe its processes; metrics are a
	// cluster's nodes' --metrics-addr (its group commit figures).
	stop    func() error
	pids    func() []int
	alive   func() error
	metrics []string
	leader  func(ctx context.Context) (string, error)
}

// PIDs are the target's process ids.
func (t *Target) PIDs() []int { return t.pids() }

// RSS is the resident set size of the target's processes, summed, in bytes.
func (t *Target) RSS() (int64, error) {
	var sum int64
	for _, pid := range t.PIDs() {
		n, err := ReadRSS(pid)
		if err != nil {
			return 0, fmt.Errorf("rss of %s: %w", t.Name, err)
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

// onLeader keeps only the address of a cluster's group 0 leader.
func (t *Target) onLeader(ctx context.Context) error {
	addr, err := t.leader(ctx)
	t.Addrs = []string{addr}
	return err
}

// tail is the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// StartTarget starts a fresh target: a server or a cluster of its own
// (the views on one, redis-anchor, redis-echo and sluice-cluster-leader,
// come from an Env). The caller stops it.
func StartTarget(ctx context.Context, cfg ServerConfig, name string) (*Target, error) {
	cfg.defaults()
	var opt startOptions
	if store, fsync, ok := durabilityOf(name); ok {
		opt.logStore, opt.fsync = store, fsync
	}
	switch {
	case name == TargetSluiceMem, name == TargetSluiceDurable:
		return startSluiceSingle(ctx, cfg, name, opt)
	case name == TargetSluiceCluster, strings.HasPrefix(name, durabilityP):
		return startSluiceCluster(ctx, cfg, name, opt)
	case name == TargetRedisAOF:
		return startRedis(ctx, cfg, name, "--appendonly", "yes", "--appendfsync", "always")
	case name == TargetRedis:
		return startRedis(ctx, cfg, name)
	}
	return nil, fmt.Errorf("%q is not a target of its own", name)
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

// startProcess starts the one server process of t (bin, found as what),
// with its output in a new folder's out.log, and waits until probe
// succeeds on addr.
func startProcess(ctx context.Context, cfg ServerConfig, t *Target, what, bin string, args func(dir string) []string, probe func(addr string) error) error {
	bin, err := checkBin(what, bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-"+t.Name+"-")
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	logPath := filepath.Join(dir, "out.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return errors.Join(err, os.RemoveAll(dir))
	}
	p, err := sluiceproc.Start(t.Name, bin, args(dir), sluiceproc.Options{Dir: dir, Output: logf, DieWithParent: true})
	if err != nil {
		logf.Close()
		return errors.Join(err, os.RemoveAll(dir))
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
		return probe(t.Addrs[0])
	})
	if err = errors.Join(err, t.alive()); err != nil {
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

// sluiceArgs are the flags every sluice node of a target takes.
func sluiceArgs(opt startOptions) []string {
	args := []string{"--log-level", "warn"}
	for _, f := range [][2]string{{"--raft-log", opt.logStore}, {"--fsync", opt.fsync}} {
		if f[1] != "" {
			args = append(args, f[0], f[1])
		}
	}
	return args
}

func startSluiceSingle(ctx context.Context, cfg ServerConfig, name string, opt startOptions) (*Target, error) {
	addr, err := sluiceproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	t := &Target{Name: name, Addrs: []string{addr}, Dialect: SluiceDialect{}}
	return t, startProcess(ctx, cfg, t, "sluice", cfg.SluiceBin, func(dir string) []string {
		args := append([]string{"--addr", addr}, sluiceArgs(opt)...)
		if name == TargetSluiceMem {
			return append(args, "--in-memory")
		}
		return append(args, "--data-dir", filepath.Join(dir, "data"))
	}, limiterProbe)
}

// startRedis starts a redis-server without persistence, or with the
// persistence arguments given (which replace --appendonly no), and loads
// the scripts.
func startRedis(ctx context.Context, cfg ServerConfig, name string, persist ...string) (*Target, error) {
	addr, err := sluiceproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	if len(persist) == 0 {
		persist = []string{"--appendonly", "no"}
	}
	_, port, _ := strings.Cut(addr, ":")
	t := &Target{Name: name, Addrs: []string{addr}, Dialect: LuaDialect{}}
	err = startProcess(ctx, cfg, t, "redis-server", cfg.RedisBin, func(dir string) []string {
		return append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", dir, "--daemonize", "no", "--loglevel", "warning"}, persist...)
	}, func(addr string) error { _, err := doAt(addr, "PING"); return err })
	if err != nil {
		return nil, err
	}
	if err := LoadScripts(addr); err != nil {
		return nil, errors.Join(err, t.Stop())
	}
	return t, nil
}

// RedisVersion is what `redis-server --version` prints, shortened.
func RedisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	s := strings.TrimSpace(string(out))
	if f := strings.Fields(s); len(f) >= 3 {
		return strings.TrimPrefix(f[2], "v=")
	}
	return s
}

// Env starts targets on first use and keeps them for the whole suite, so
// that rounds can alternate between them; the redis views share one
// redis-server, the leader view the cluster. A target that fails to start
// is remembered as unavailable with its reason.
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

// Get returns the running target, starting it on first use.
func (e *Env) Get(ctx context.Context, name string) (*Target, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.get(ctx, name)
}

func (e *Env) get(ctx context.Context, name string) (t *Target, err error) {
	if t, ok := e.targets[name]; ok {
		return t, t.Alive()
	}
	if err, ok := e.errs[name]; ok {
		return nil, err
	}
	switch name {
	case TargetRedisAnchor, TargetRedisEcho:
		if t, err = e.get(ctx, TargetRedis); err == nil {
			t = t.view(name, redisView(name))
		}
	case TargetSluiceClusterLeader:
		if t, err = e.get(ctx, TargetSluiceCluster); err == nil {
			t = t.view(name, t.Dialect)
			err = t.onLeader(ctx)
		}
	default:
		e.cfg.Logger.Info("starting target", "target", name)
		t, err = StartTarget(ctx, e.cfg, name)
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
	for _, name := range []string{TargetSluiceCluster, TargetSluiceDurable, TargetSluiceMem} {
		t = cmp.Or(e.targets[name], t)
	}
	e.mu.Unlock()
	if t == nil {
		return ""
	}
	version := cmp.Or(info(ctx, t, "server")["sluice_version"], "unknown")
	if fi, err := os.Stat(e.cfg.SluiceBin); err == nil {
		version += fmt.Sprintf(" (%s, built %s)", e.cfg.SluiceBin, fi.ModTime().UTC().Format("2006-01-02 15:04 MST"))
	}
	return version
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
