package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/cluster"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/script"
	"github.com/sluice-rl/sluice/resp"
)

// config is everything the flags set, validated before anything starts.
type config struct {
	Addr           string
	RequirePass    string
	ProtectedMode  string
	EnableDebug    yesNo
	InMemory       bool
	DataDir        string
	RaftLog        choice // --raft-log: the log store
	Fsync          choice // --fsync (or appendfsync): the durability mode
	ID             string
	RaftAddr       string
	ForwardAddr    string
	Peers          string
	NoBootstrap    bool
	ClusterTimeout time.Duration
	LockStripes    int  // --lock-stripes: the engine's lock stripes
	Shards         int  // --shards: Raft groups (slot ranges), 1 to cluster.MaxShards
	Redirect       bool // --redirect: MOVED instead of forwarding keyed commands
	MaxKeyLen      int
	MaxLogLimit    int64
	MaxValueLen    int
	MaxCollLen     int // --max-collection-len
	MaxClients     int
	Limits         resp.Limits
	LogLevel       string
	LogFormat      string
	GCPercent      int
	GCMinHeadroom  byteSize
	// Scripts (SPEC section 14): the budgets of one run and the bound of
	// the script cache; the same on every node (replicated behaviour).
	ScriptMaxSteps  int64
	ScriptMaxMemory byteSize
	ScriptCacheMax  int64
	// ScriptNative runs the scripts recognised by their SHA1 natively
	// (resp/scripts_native.go); false: every script in the interpreter.
	ScriptNative bool
	opsConfig    // TLS, memory limits, metrics, --config (opsconfig.go)
	debugConfig  // hidden flags for fault-injection tests only (debugflags.go)
	rlsConfig    // Envoy's rate limit service (rls.go)

	// ShutdownTimeout bounds a graceful stop (main.go): the handover, then
	// the commands taken in.
	ShutdownTimeout time.Duration
}

// yesNo is a boolean flag that also takes Redis's yes/no spelling:
// --enable-debug-command, --enable-debug-command=yes.
type yesNo bool

func (y *yesNo) String() string {
	if y != nil && *y {
		return "yes"
	}
	return "no"
}

func (y *yesNo) Set(s string) error {
	switch strings.ToLower(s) {
	case "yes", "true", "1", "local":
		*y = true
	case "no", "false", "0":
		*y = false
	default:
		return fmt.Errorf("want yes or no, got %q", s)
	}
	return nil
}

func (y *yesNo) IsBoolFlag() bool { return true }

// choice is a flag taking one of a few words.
type choice struct {
	value   string
	allowed []string
}

func newChoice(def string, allowed ...string) choice {
	return choice{value: def, allowed: allowed}
}

func (c *choice) String() string {
	if c == nil {
		return ""
	}
	return c.value
}

func (c *choice) Set(s string) error {
	s = strings.ToLower(s)
	if !slices.Contains(c.allowed, s) {
		return fmt.Errorf("want %s, got %q", orList(c.allowed), s)
	}
	c.value = s
	return nil
}

// orList renders "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// parseFlags parses args (without the program name) into a validated config.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{
		Limits:  resp.DefaultLimits(),
		RaftLog: newChoice("", cluster.LogStoreBolt, cluster.LogStoreWAL), // "": the data dir's, else wal
		Fsync:   newChoice(cluster.FsyncAlways, cluster.FsyncAlways, cluster.FsyncEverysec, cluster.FsyncNo),
	}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:6379", "RESP address to listen on")
	fs.StringVar(&c.RequirePass, "requirepass", "", "password clients must AUTH with (default none)")
	fs.StringVar(&c.ProtectedMode, "protected-mode", "yes", "yes: refuse to listen beyond loopback without --requirepass")
	fs.Var(&c.EnableDebug, "enable-debug-command", "allow DEBUG TIMEWARP and DEBUG CLOCK (tests)")
	fs.BoolVar(&c.InMemory, "in-memory", false, "keep no data on disk")
	fs.StringVar(&c.DataDir, "data-dir", "sluice-data", "directory for the Raft log and snapshots")
	fs.Var(&c.RaftLog, "raft-log", "the Raft log store: wal (append-only segments, one fsync per append) or bolt (one B+tree file); default: the store the data dir holds, wal for a new one (a data dir keeps the store it was created with)")
	fs.Var(&c.Fsync, "fsync", "durability: always (answer after a majority has the entry on disk), everysec (flush at least once a second) or no (leave flushing to the OS)")
	fs.Var(&c.Fsync, "appendfsync", "the same as --fsync (Redis's name)")
	fs.StringVar(&c.ID, "id", "", "this node's id in the cluster (default: node1 on a single node)")
	fs.StringVar(&c.RaftAddr, "raft-addr", "", "Raft address (default: 127.0.0.1, RESP port + 1000)")
	fs.StringVar(&c.ForwardAddr, "forward-addr", "", "address followers forward commands to (default: Raft port + 1000)")
	fs.StringVar(&c.Peers, "peers", "", "the cluster's voters: id=raft-addr,id=raft-addr,...")
	fs.BoolVar(&c.NoBootstrap, "no-bootstrap", false, "start empty and wait to be added to a cluster with RAFT.JOIN")
	fs.DurationVar(&c.ClusterTimeout, "cluster-timeout", 2*time.Second, "fail commands with CLUSTERDOWN (not applied) or UNCERTAIN (may have been) after this long without a majority")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGTERM or SIGINT, how long to hand the node's Raft leaderships over and answer the commands taken in before stopping anyway (a second signal stops at once)")
	fs.IntVar(&c.LockStripes, "lock-stripes", 256, "engine lock stripes (a power of two)")
	fs.IntVar(&c.Shards, "shards", 1, "Raft groups per node, each owning a range of the 16384 hash slots (1 to 64; a data dir keeps the count it was made with)")
	fs.BoolVar(&c.Redirect, "redirect", false, "with --peers: a follower answers keyed commands with -MOVED to the leader instead of forwarding them")
	fs.IntVar(&c.MaxKeyLen, "max-key-len", 1024, "longest key in bytes")
	fs.Int64Var(&c.MaxLogLimit, "max-log-limit", 100000, "largest RL.LOG limit and RL.ACQUIRE limit")
	fs.IntVar(&c.MaxValueLen, "max-value-len", 512, "longest string value in bytes (SET, INCRBY); the same on every node")
	fs.IntVar(&c.MaxCollLen, "max-collection-len", 1_000_000, "most elements of a hash, sorted set or list; the same on every node")
	fs.IntVar(&c.MaxClients, "maxclients", 10000, "most connected clients")
	fs.Int64Var(&c.Limits.MaxBulk, "proto-max-bulk-len", c.Limits.MaxBulk, "longest bulk string in bytes")
	fs.Int64Var(&c.Limits.MaxArgs, "max-args", c.Limits.MaxArgs, "most arguments in one command")
	fs.Int64Var(&c.Limits.MaxInline, "max-inline", c.Limits.MaxInline, "longest inline command in bytes")
	fs.Int64Var(&c.Limits.MaxQueryBuffer, "client-query-buffer-limit", c.Limits.MaxQueryBuffer, "most bytes of one unfinished command")
	fs.Int64Var(&c.Limits.PreAuthMaxBulk, "preauth-max-bulk-len", c.Limits.PreAuthMaxBulk, "longest bulk before AUTH")
	fs.Int64Var(&c.Limits.PreAuthMaxArgs, "preauth-max-args", c.Limits.PreAuthMaxArgs, "most arguments before AUTH")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.IntVar(&c.GCPercent, "gc-percent", 25, "Go GC target: heap growth over live data before a collection (the GOGC environment variable wins)")
	fs.Int64Var(&c.ScriptMaxSteps, "script-max-steps", script.DefaultMaxSteps, "Lua instructions one script may run before it stops with an error and its writes are undone; the same on every node")
	c.ScriptMaxMemory = script.DefaultMaxMemory
	fs.Var(&c.ScriptMaxMemory, "script-max-memory", "bytes of strings one script may create (e.g. 64mb) before it stops with an error and its writes are undone; the same on every node")
	fs.BoolVar(&c.ScriptNative, "script-native", true, "run the scripts sluice recognises by their SHA1 (Spring Cloud Gateway's and redis_rate's rate limiters) natively, with the interpreted run's replies and effects; false runs every script in Lua")
	fs.Int64Var(&c.ScriptCacheMax, "script-cache-max", engine.DefaultScriptCacheMax, "most scripts kept by SCRIPT LOAD and EVAL (and 64 MiB of them): beyond it a new script is refused, nothing is evicted")
	c.GCMinHeadroom = 16 << 20
	fs.Var(&c.GCMinHeadroom, "gc-min-headroom", "least heap growth in bytes between collections (e.g. 16mb): raises --gc-percent, up to 1000, while the live heap is small (0: keep --gc-percent fixed)")
	c.registerOps(fs)
	c.registerRLS(fs)
	args, err := c.debugConfig.extract(args)
	if err != nil {
		return nil, err
	}
	if err := c.applyConfigFile(fs, args); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	return c, c.validate()
}

// validate names every bad setting.
func (c *config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", c.setting(field), fmt.Sprintf(format, args...)))
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		bad("addr", "%v", err)
	}
	switch strings.ToLower(c.ProtectedMode) {
	case "yes":
		if err == nil && !isLoopback(host) && c.RequirePass == "" {
			bad("addr", "DENIED listening on %s beyond loopback without --requirepass; set a password or start with --protected-mode no", c.Addr)
		}
	case "no":
	default:
		bad("protected-mode", "want yes or no, got %q", c.ProtectedMode)
	}
	if c.LockStripes < 1 || c.LockStripes > 1<<16 {
		bad("lock-stripes", "want 1 to 65536, got %d", c.LockStripes)
	}
	if c.Shards < 1 || c.Shards > cluster.MaxShards {
		bad("shards", "want 1 to %d Raft groups, got %d (the engine's lock stripes, which --shards used to name, are --lock-stripes)", cluster.MaxShards, c.Shards)
	} else if c.Shards > 1 && c.InMemory && c.Peers == "" && !c.NoBootstrap {
		bad("shards", "a single node in memory runs no Raft group: --shards %d needs --peers, or a data dir", c.Shards)
	}
	if c.Redirect && c.Peers == "" && !c.NoBootstrap {
		bad("redirect", "needs --peers (or --no-bootstrap): a single node has no leader to redirect to")
	}
	if c.MaxKeyLen < 1 || c.MaxKeyLen > 64<<10 {
		bad("max-key-len", "want 1 to 65536, got %d", c.MaxKeyLen)
	}
	if c.MaxLogLimit < 1 || c.MaxLogLimit > 10_000_000 {
		bad("max-log-limit", "want 1 to 10000000, got %d", c.MaxLogLimit)
	}
	if c.MaxValueLen < 20 || c.MaxValueLen > 1<<20 {
		// 20 bytes hold any 64-bit integer INCRBY can write.
		bad("max-value-len", "want 20 to 1048576, got %d", c.MaxValueLen)
	}
	if c.MaxCollLen < 1 || c.MaxCollLen > 100_000_000 {
		bad("max-collection-len", "want 1 to 100000000, got %d", c.MaxCollLen)
	}
	if c.ScriptMaxSteps < 1000 || c.ScriptMaxSteps > 1_000_000_000 {
		bad("script-max-steps", "want 1000 to 1000000000, got %d", c.ScriptMaxSteps)
	}
	if c.ScriptMaxMemory < 1<<20 || c.ScriptMaxMemory > 1<<30 {
		bad("script-max-memory", "want 1mb to 1gb, got %d", int64(c.ScriptMaxMemory))
	}
	if c.ScriptCacheMax < 1 || c.ScriptCacheMax > 1_000_000 {
		bad("script-cache-max", "want 1 to 1000000, got %d", c.ScriptCacheMax)
	}
	if c.MaxClients < 1 {
		bad("maxclients", "want at least 1, got %d", c.MaxClients)
	}
	for name, v := range map[string]int64{
		"proto-max-bulk-len": c.Limits.MaxBulk, "max-args": c.Limits.MaxArgs, "max-inline": c.Limits.MaxInline,
		"client-query-buffer-limit": c.Limits.MaxQueryBuffer, "preauth-max-bulk-len": c.Limits.PreAuthMaxBulk,
		"preauth-max-args": c.Limits.PreAuthMaxArgs,
	} {
		if v < 1 {
			bad(name, "want at least 1, got %d", v)
		}
	}
	if c.ClusterTimeout <= 0 {
		bad("cluster-timeout", "want a positive duration, got %s", c.ClusterTimeout)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "want a positive duration, got %s", c.ShutdownTimeout)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log-level", "%v", err)
	}
	if c.GCPercent < 10 || c.GCPercent > 1000 {
		bad("gc-percent", "want 10 to 1000, got %d", c.GCPercent)
	}
	if c.GCMinHeadroom < 0 {
		bad("gc-min-headroom", "want 0 (off) or a size in bytes, got %d", c.GCMinHeadroom)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", "want text or json, got %q", c.LogFormat)
	}
	for _, ch := range []struct {
		name string
		c    *choice
	}{{"raft-log", &c.RaftLog}, {"fsync", &c.Fsync}} {
		// --raft-log may stay unset: the data dir's store, else wal.
		if !slices.Contains(ch.c.allowed, ch.c.value) && !(ch.c == &c.RaftLog && ch.c.value == "") {
			bad(ch.name, "want %s, got %q", orList(ch.c.allowed), ch.c.value)
		}
	}
	c.validateOps(bad)
	c.validateRLS(bad)
	c.checkPeers(bad)
	if c.TLSAddr != "" && c.TLSCertFile != "" && c.TLSKeyFile != "" {
		if _, err := c.clientTLSConfig(); err != nil { // names its settings
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// logger builds the process's logger.
func (c *config) logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
