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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/internal/freeport"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
)

// The targets the tool knows how to start.
const (
	// TargetSluiceMem is one sluice node with --in-memory.
	TargetSluiceMem = "sluice-mem"
	// TargetSluiceDurable is one sluice node with a temporary --data-dir.
	TargetSluiceDurable = "sluice-durable"
	// TargetSluiceCluster is three durable sluice nodes forming a Raft
	// cluster; connections are spread over the three.
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
	for _, n := range TargetNames() {
		if n == s {
			return s, nil
		}
	}
	return "", fmt.Errorf("unknown target %q (want one of %s)", s, strings.Join(TargetNames(), ", "))
}

// IsRedis reports whether a target is a redis-server one.
func IsRedis(name string) bool {
	return name == TargetRedis || name == TargetRedisAnchor || name == TargetRedisEcho || name == TargetRedisAOF
}

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
	procs   []*process
	dirs    []string // removed on Stop
	owned   bool     // Stop stops the processes (false for a view sharing them)
	// metrics are the nodes' --metrics-addr (a cluster's, when the binary
	// has the flag): ops per log entry are read from them.
	metrics []string
	// route, when set, routes every request to its key's master
	// (LoadOptions.Route).
	route *SlotRoute
}

// PIDs are the target's process ids.
func (t *Target) PIDs() []int {
	pids := make([]int, len(t.procs))
	for i, p := range t.procs {
		pids[i] = p.Pid()
	}
	return pids
}

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

// Do runs one command on the target's first address.
func (t *Target) Do(ctx context.Context, args ...string) (Value, error) {
	return DoAt(ctx, t.Addrs[0], args...)
}

// Flush forgets every key (FLUSHALL).
func (t *Target) Flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := t.Do(ctx, "FLUSHALL"); err != nil {
		return fmt.Errorf("%s: FLUSHALL: %w", t.Name, err)
	}
	return nil
}

// Alive reports an error if a process of the target has exited.
func (t *Target) Alive() error {
	for _, p := range t.procs {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited: %v; last output: %s", p.Name, p.Err(), p.tail.String())
		default:
		}
	}
	return nil
}

// Stop stops the target's processes and removes its data directories.
func (t *Target) Stop() error {
	if !t.owned {
		return nil
	}
	var errs []error
	for _, p := range t.procs {
		if err := p.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range t.dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	t.procs, t.dirs = nil, nil
	return errors.Join(errs...)
}

// onLeader returns a view of cluster target t (sharing its processes, not
// owning them) named TargetSluiceClusterLeader whose only address is the
// leader's, as RAFT.STATUS on t's first node names it. When t owns its
// processes, the view takes them over.
func onLeader(ctx context.Context, t *Target) (*Target, error) {
	v, err := DoAt(ctx, t.Addrs[0], "RAFT.STATUS")
	if err != nil {
		t.Stop()
		return nil, fmt.Errorf("cluster leader: RAFT.STATUS: %w", err)
	}
	leader := ""
	for i := 0; i+1 < len(v.Array); i += 2 {
		if v.Array[i].Str == "leader_addr" {
			leader = v.Array[i+1].Str
		}
	}
	if !slices.Contains(t.Addrs, leader) {
		t.Stop()
		return nil, fmt.Errorf("cluster leader: RAFT.STATUS names %q, not one of %v", leader, t.Addrs)
	}
	t.Name, t.Addrs = TargetSluiceClusterLeader, []string{leader}
	return t, nil
}

// waitNewestVersion waits until every group on every node runs the
// cluster version its binary supports: a new cluster starts at version 1
// and its leaders raise it within a second or two, and until then the
// commands of later releases (INCRBY, RL.CHECK, ...) are refused. A binary
// whose RAFT.STATUS names no cluster version (before v0.2.0) has nothing to
// wait for.
func waitNewestVersion(ctx context.Context, addrs []string, groups int) error {
	for _, addr := range addrs {
		for g := 0; g < groups; g++ {
			for {
				v, err := DoAt(ctx, addr, "RAFT.STATUS", strconv.Itoa(g))
				if err != nil {
					return fmt.Errorf("RAFT.STATUS %d on %s: %w", g, addr, err)
				}
				fields := map[string]string{}
				for i := 0; i+1 < len(v.Array); i += 2 {
					fields[v.Array[i].Str] = v.Array[i+1].Str
				}
				if fields["cluster_version"] == fields["cluster_version_supported"] {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%s group %d still at cluster version %s of %s: %w", addr, g,
						fields["cluster_version"], fields["cluster_version_supported"], ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// DoAt runs one command on a fresh connection to addr.
func DoAt(ctx context.Context, addr string, args ...string) (Value, error) {
	c, err := Dial(ctx, addr)
	if err != nil {
		return Value{}, err
	}
	defer c.Close()
	return c.Do(ctx, args...)
}

// ReadRSS is a process's resident set size in bytes, from /proc/PID/status.
func ReadRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read rss: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("read rss: no VmRSS in /proc/%d/status", pid)
}

// FreePorts returns n distinct TCP ports of 127.0.0.1 that were free a
// moment ago, below the ephemeral range (see internal/freeport), for the
// servers to take.
func FreePorts(n int) ([]int, error) {
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	return ports, nil
}

// tailBuffer keeps the last bytes a process wrote, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && len(s)-i < 80 {
		// keep the last few lines only
		lines := strings.Split(s, "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		s = strings.Join(lines, " | ")
	}
	if s == "" {
		return "(none)"
	}
	return s
}

// process is a started server process and the tail of its output.
type process struct {
	*sluiceproc.Process
	tail *tailBuffer
}

// startProcess starts bin with args in dir; the process dies with this one.
func startProcess(name, bin string, args []string, dir string) (*process, error) {
	tail := &tailBuffer{max: 4096}
	p, err := sluiceproc.Start(name, bin, args, sluiceproc.Options{Dir: dir, Output: tail, DieWithParent: true})
	if err != nil {
		return nil, err
	}
	return &process{Process: p, tail: tail}, nil
}

// waitReady polls addr until probe succeeds on a connection, the process
// exits, or ctx ends.
func waitReady(ctx context.Context, p *process, addr string, probe func(context.Context, *Conn) error) error {
	var last error
	for {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited at start (%v); output: %s", p.Name, p.Err(), p.tail.String())
		default:
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s not ready: %w (last: %v); output: %s", p.Name, err, last, p.tail.String())
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := Dial(pctx, addr)
		if err == nil {
			err = probe(pctx, c)
			c.Close()
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func pingProbe(ctx context.Context, c *Conn) error {
	v, err := c.Do(ctx, "PING")
	if err != nil {
		return err
	}
	if v.Str != "PONG" {
		return fmt.Errorf("PING replied %q", v.String())
	}
	return nil
}

// limiterProbe succeeds when an RL.TOKEN call is decided (a cluster with a
// leader and a committed write), then removes the probe key.
func limiterProbe(ctx context.Context, c *Conn) error {
	v, err := c.Do(ctx, "RL.TOKEN", "bench:probe", "10", "1/s")
	if err != nil {
		return err
	}
	if _, err := v.Ints(); err != nil {
		return err
	}
	_, err = c.Do(ctx, "DEL", "bench:probe")
	return err
}

// sluiceFlags lists the flags a sluice binary's --help mentions.
func sluiceFlags(bin string) string {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return string(out)
}

// StartTarget starts a fresh target. The caller stops it.
func StartTarget(ctx context.Context, cfg ServerConfig, name string, opt StartOptions) (*Target, error) {
	cfg.defaults()
	switch name {
	case TargetSluiceMem, TargetSluiceDurable:
		return startSluiceSingle(ctx, cfg, name, opt)
	case TargetSluiceCluster:
		return startSluiceCluster(ctx, cfg, opt)
	case TargetSluiceClusterShards3:
		opt.Shards = 3
		t, err := startSluiceCluster(ctx, cfg, opt)
		if err != nil {
			return nil, err
		}
		t.Name = name
		return t, nil
	case TargetSluiceClusterLeader:
		t, err := startSluiceCluster(ctx, cfg, opt)
		if err != nil {
			return nil, err
		}
		return onLeader(ctx, t)
	case TargetRedisAOF:
		t, err := startRedis(ctx, cfg, "--appendonly", "yes", "--appendfsync", "always")
		if err != nil {
			return nil, err
		}
		t.Name = name
		return t, nil
	case TargetRedis, TargetRedisAnchor, TargetRedisEcho:
		t, err := startRedis(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if name != TargetRedis {
			t.Name, t.Dialect = name, redisView(name)
		}
		return t, nil
	}
	if store, fsync, ok := durabilityOf(name); ok {
		opt.LogStore, opt.Fsync = store, fsync
		t, err := startSluiceCluster(ctx, cfg, opt)
		if err != nil {
			return nil, err
		}
		if t, err = onLeader(ctx, t); err != nil {
			return nil, err
		}
		t.Name = name
		return t, nil
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

func checkBin(what, bin string) error {
	if bin == "" {
		return fmt.Errorf("%s: no binary given", what)
	}
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%s binary %s: %w", what, bin, err)
	}
	return nil
}

func startSluiceSingle(ctx context.Context, cfg ServerConfig, name string, opt StartOptions) (*Target, error) {
	if err := checkBin("sluice", cfg.SluiceBin); err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{"--addr", addr, "--log-level", "warn"}
	t := &Target{Name: name, Addrs: []string{addr}, Dialect: SluiceDialect{}, owned: true}
	if name == TargetSluiceMem {
		args = append(args, "--in-memory")
	} else {
		dir, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-data-")
		if err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		t.dirs = append(t.dirs, dir)
		args = append(args, "--data-dir", dir)
	}
	if opt.Debug {
		args = append(args, "--enable-debug-command")
	}
	bin, _ := filepath.Abs(cfg.SluiceBin)
	if err := t.launch(ctx, cfg.StartTimeout, name, bin, args, "", addr, limiterProbe); err != nil {
		return nil, err
	}
	return t, nil
}

// launch starts one process of t (bin with args, in dir) and waits until
// probe succeeds on addr, within timeout; if it cannot, it stops t.
func (t *Target) launch(ctx context.Context, timeout time.Duration, name, bin string, args []string, dir, addr string, probe func(context.Context, *Conn) error) error {
	p, err := startProcess(name, bin, args, dir)
	if err != nil {
		t.Stop()
		return err
	}
	t.procs = append(t.procs, p)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := waitReady(sctx, p, addr, probe); err != nil {
		t.Stop()
		return err
	}
	return nil
}

func startSluiceCluster(ctx context.Context, cfg ServerConfig, opt StartOptions) (*Target, error) {
	if err := checkBin("sluice", cfg.SluiceBin); err != nil {
		return nil, err
	}
	bin, _ := filepath.Abs(cfg.SluiceBin)
	flags := sluiceFlags(bin)
	forward := strings.Contains(flags, "forward-addr")
	metrics := strings.Contains(flags, "metrics-addr")
	if (opt.LogStore != "" || opt.Fsync != "") && !strings.Contains(flags, "raft-log") {
		return nil, fmt.Errorf("%s has no --raft-log or --fsync flag", bin)
	}
	ports, err := FreePorts(12)
	if err != nil {
		return nil, err
	}
	t := &Target{Name: TargetSluiceCluster, Dialect: SluiceDialect{}, owned: true}
	base, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-cluster-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	t.dirs = append(t.dirs, base)
	nodes, err := sluiceproc.Layout(3, base, func() (string, error) {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		ports = ports[1:]
		return addr, nil
	})
	if err != nil {
		return nil, err
	}
	peers := sluiceproc.Peers(nodes)
	for _, nd := range nodes {
		if !forward {
			nd.Fwd = ""
		}
		common := []string{"--log-level", "warn"}
		if metrics {
			m := fmt.Sprintf("127.0.0.1:%d", ports[0])
			ports = ports[1:]
			common = append(common, "--metrics-addr", m)
			t.metrics = append(t.metrics, m)
		}
		if opt.LogStore != "" {
			common = append(common, "--raft-log", opt.LogStore)
		}
		if opt.Fsync != "" {
			common = append(common, "--fsync", opt.Fsync)
		}
		if opt.Debug {
			common = append(common, "--enable-debug-command")
		}
		if opt.Shards > 1 {
			common = append(common, "--shards", strconv.Itoa(opt.Shards))
		}
		p, err := startProcess("sluice "+nd.ID, bin, nd.Args(peers, common...), "")
		if err != nil {
			t.Stop()
			return nil, err
		}
		t.procs = append(t.procs, p)
		t.Addrs = append(t.Addrs, nd.RESP)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*cfg.StartTimeout)
	defer cancel()
	for i, p := range t.procs {
		if err := waitReady(sctx, p, t.Addrs[i], limiterProbe); err != nil {
			t.Stop()
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if err := waitNewestVersion(sctx, t.Addrs, max(opt.Shards, 1)); err != nil {
		t.Stop()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if opt.Shards > 1 {
		// Wait for the leaders to spread (one group per node), then route.
		if t.route, err = waitClusterRoute(sctx, t.Addrs[0], min(opt.Shards, len(t.Addrs)), 2*cfg.StartTimeout); err != nil {
			t.Stop()
			return nil, err
		}
		t.Addrs = t.route.Addrs
	}
	return t, nil
}

// startRedis starts a redis-server without persistence, or with the
// persistence arguments given (which replace --appendonly no).
func startRedis(ctx context.Context, cfg ServerConfig, persist ...string) (*Target, error) {
	if err := checkBin("redis-server", cfg.RedisBin); err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "sluice-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	t := &Target{Name: TargetRedis, Addrs: []string{addr}, Dialect: LuaDialect{}, owned: true, dirs: []string{dir}}
	if len(persist) == 0 {
		persist = []string{"--appendonly", "no"}
	}
	args := append([]string{
		"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
		"--save", "", "--dir", dir, "--daemonize", "no",
		"--loglevel", "warning",
	}, persist...)
	if err := t.launch(ctx, cfg.StartTimeout, "redis-server", cfg.RedisBin, args, dir, addr, pingProbe); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	c, err := Dial(sctx, addr)
	if err != nil {
		t.Stop()
		return nil, err
	}
	defer c.Close()
	if err := LoadScripts(sctx, c); err != nil {
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

// Get returns the running target, starting it on first use.
func (e *Env) Get(ctx context.Context, name string) (*Target, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.targets[name]; ok {
		if err := t.Alive(); err != nil {
			return nil, err
		}
		return t, nil
	}
	if err, ok := e.errs[name]; ok {
		return nil, err
	}
	var t *Target
	var err error
	switch name {
	case TargetRedisAnchor, TargetRedisEcho: // views on the redis target
		e.mu.Unlock()
		base, berr := e.Get(ctx, TargetRedis)
		e.mu.Lock()
		if berr != nil {
			err = berr
		} else {
			t = &Target{Name: name, Addrs: base.Addrs, Dialect: redisView(name), procs: base.procs}
		}
	case TargetSluiceClusterLeader: // a view on the cluster target
		e.mu.Unlock()
		base, berr := e.Get(ctx, TargetSluiceCluster)
		if berr == nil {
			t, berr = onLeader(ctx, &Target{Name: base.Name, Addrs: base.Addrs, Dialect: base.Dialect, procs: base.procs, metrics: base.metrics})
		}
		e.mu.Lock()
		err = berr
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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := t.Do(ctx, "INFO", "server")
	version := "unknown"
	if err == nil {
		for _, line := range strings.Split(v.Str, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "sluice_version:"); ok {
				version = rest
			}
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
