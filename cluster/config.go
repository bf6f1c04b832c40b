package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/peer"
)

// Config configures a Node. The zero value of every optional field means
// its default; Validate names every field that is wrong.
type Config struct {
	// ID is this node's Raft server ID (e.g. "n1"). Required.
	ID string
	// RaftAddr is the host:port the Raft listener listens on (on
	// Network). Required. Port 0 picks a free port (only without Peers,
	// since the others must know it).
	RaftAddr string
	// RaftAdvertise is the address the others dial for Raft, when RaftAddr
	// binds an unspecified IP such as 0.0.0.0.
	RaftAdvertise string
	// RESPAddr is this node's advertised RESP address (host:port), which
	// RAFT.STATUS reports as leader_addr when this node leads. Required.
	RESPAddr string
	// ForwardAddr is where this node listens for batches that followers
	// forward to it when it leads. Default: RaftAddr's host with its port
	// + 1000 (127.0.0.1:8001 for 127.0.0.1:7001).
	ForwardAddr string
	// ForwardAdvertise is the forward address the others dial, when
	// ForwardAddr binds an unspecified IP.
	ForwardAdvertise string
	// DataDir holds the log store and snapshots/. Required unless
	// InMemory.
	DataDir string
	// InMemory keeps the log, stable state and snapshots in memory: a
	// restart forgets everything.
	InMemory bool
	// LogStore is the store of Raft's log on disk: LogStoreWAL or
	// LogStoreBolt. A data dir keeps the store it was created with: NewHost
	// refuses the other one. Empty means the store the data dir already
	// holds, or DefaultLogStore for a new one (ResolveLogStore).
	LogStore string
	// Fsync is the durability mode: FsyncAlways (the default),
	// FsyncEverysec or FsyncNo; cluster/logstore says what each risks.
	Fsync string
	// Peers maps every voter's ID to its Raft address, this node included.
	// All nodes given the same Peers bootstrap one cluster; empty means a
	// single voter of this node alone (unless NoBootstrap).
	Peers map[string]string
	// NoBootstrap starts a node that bootstraps nothing and waits to be
	// added with RAFT.JOIN on the leader.
	NoBootstrap bool

	// ClusterTimeout bounds how long a command waits for the cluster
	// before it fails with CLUSTERDOWN (default 2s).
	ClusterTimeout time.Duration
	// MaxBatchOps bounds the operations in one log entry (default 1024).
	// A single pipeline larger than that still goes whole in one entry.
	MaxBatchOps int
	// MaxBatchBytes bounds the encoded bytes of one log entry (default
	// 256 KiB), with the same exception. Raft's log cache keeps the last
	// 512 entries in memory, so this also bounds that cache.
	MaxBatchBytes int
	// MaxInflight bounds the log entries handed to Raft and not yet
	// applied (default 4). A second entry goes in flight only once it
	// holds MaxBatchOps/4 operations: see batcher.go.
	MaxInflight int
	// BatchFill is how many operations an entry must hold before it joins
	// others in flight (an entry goes at once when none is in flight);
	// default MaxBatchOps/4. Larger means fewer, larger entries: fewer
	// fsyncs per operation, at some latency.
	BatchFill int
	// ForwardConns is how many pooled connections a follower keeps to the
	// leader's forward address (default 2).
	ForwardConns int

	// SnapshotThreshold is how many log entries trigger a snapshot
	// (default 8192); Raft keeps 1.25x as many trailing entries behind it.
	SnapshotThreshold uint64
	// SnapshotInterval is how often Raft checks the threshold (default
	// 30s).
	SnapshotInterval time.Duration
	// SnapshotRetain is how many snapshots are kept on disk (default 2).
	SnapshotRetain int

	// SweepInterval is how often state back at its initial state is
	// reclaimed (default 100ms); SweepKeys bounds the keys examined per
	// sweep (default 4096).
	SweepInterval time.Duration
	SweepKeys     int

	// Raft's timing (defaults 1s, 1s, 500ms; tests use far less).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration

	// Logger receives the node's logs and, through an adapter, Raft's.
	// Default slog.Default().
	Logger *slog.Logger
	// RaftLogLevel is the least severe of Raft's own messages to pass on
	// (default slog.LevelInfo: elections, snapshots, failures).
	RaftLogLevel slog.Level

	// Now is the leader's wall clock, in nanoseconds since the Unix epoch,
	// stamped into every log entry (default time.Now().UnixNano()).
	Now func() int64
	// TLS, when set, runs Raft and forwarding over mutual TLS with this
	// configuration (PeerTLSConfig, tls.go): peers without a certificate
	// signed by its CA are refused.
	TLS *tls.Config
	// DialMap, for fault-injection tests only, maps a peer's Raft or
	// forward address to the address this node dials instead (a proxy
	// that can cut this one link): see cluster/peer/dialmap.go. Plain TCP
	// only.
	DialMap map[string]string
	// Network is where the node listens and how it dials its peers: every
	// stream of Raft, forwarding and the control messages goes through
	// it. Nil means TCP with the peer socket options, over mutual TLS when
	// TLS is set (peer.TCPNetwork); in-process tests pass a node of a
	// memnet.Inmem network (internal/testkit/memnet).
	Network peer.Network

	// applyHook, when set, runs at the start of every FSM batch (tests
	// stall replay with it).
	applyHook func()
	// advertiseVersion, when set, is the cluster version the node says it
	// supports in the version poll instead of SupportedVersion (tests: a
	// member of an older release).
	advertiseVersion uint32
	// bootstrapVersion, when set, is the cluster version a group this node
	// bootstraps starts at instead of advertisedVersion (tests: a cluster
	// bootstrapped by an older release, upgraded in place).
	bootstrapVersion uint32
}

// Defaults.
const (
	DefaultLogStore          = LogStoreWAL
	DefaultClusterTimeout    = 2 * time.Second
	DefaultMaxBatchOps       = 1024
	DefaultMaxBatchBytes     = 256 << 10
	DefaultMaxInflight       = 4
	DefaultForwardConns      = 2
	DefaultSnapshotThreshold = 8192
	DefaultSnapshotInterval  = 30 * time.Second
	DefaultSnapshotRetain    = 2
	DefaultSweepInterval     = 100 * time.Millisecond
	DefaultSweepKeys         = 4096
	// forwardPortOffset is added to the Raft port for the default forward
	// address.
	forwardPortOffset = 1000
)

// Validate checks the configuration and names every field that is wrong.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.ID == "" {
		bad("ID", "must not be empty")
	} else if strings.ContainsAny(c.ID, "=, \t\r\n") {
		bad("ID", "%q must not contain '=', ',' or white space", c.ID)
	}
	if c.RaftAddr == "" {
		bad("RaftAddr", "must not be empty")
	} else if err := checkHostPort(c.RaftAddr); err != nil {
		bad("RaftAddr", "%v", err)
	} else if unspecified(c.RaftAddr) && c.RaftAdvertise == "" {
		bad("RaftAdvertise", "required when RaftAddr %q binds every interface", c.RaftAddr)
	}
	if c.RaftAdvertise != "" {
		if err := checkHostPort(c.RaftAdvertise); err != nil {
			bad("RaftAdvertise", "%v", err)
		} else if unspecified(c.RaftAdvertise) || port(c.RaftAdvertise) == 0 {
			bad("RaftAdvertise", "%q must name a host and port others can dial", c.RaftAdvertise)
		}
	}
	if c.RESPAddr == "" {
		bad("RESPAddr", "must not be empty")
	} else if err := checkHostPort(c.RESPAddr); err != nil {
		bad("RESPAddr", "%v", err)
	}
	if c.ForwardAddr != "" {
		if err := checkHostPort(c.ForwardAddr); err != nil {
			bad("ForwardAddr", "%v", err)
		} else if unspecified(c.ForwardAddr) && c.ForwardAdvertise == "" {
			bad("ForwardAdvertise", "required when ForwardAddr %q binds every interface", c.ForwardAddr)
		}
	}
	if c.ForwardAdvertise != "" {
		if err := checkHostPort(c.ForwardAdvertise); err != nil {
			bad("ForwardAdvertise", "%v", err)
		}
	}
	if c.InMemory && c.DataDir != "" {
		bad("DataDir", "must be empty with InMemory")
	} else if !c.InMemory && c.DataDir == "" {
		bad("DataDir", "required unless InMemory")
	}
	switch c.LogStore {
	case "", LogStoreBolt, LogStoreWAL:
	default:
		bad("LogStore", "%q is not %q or %q", c.LogStore, LogStoreWAL, LogStoreBolt)
	}
	switch c.Fsync {
	case "", FsyncAlways, FsyncEverysec, FsyncNo:
	default:
		bad("Fsync", "%q is not %q, %q or %q", c.Fsync, FsyncAlways, FsyncEverysec, FsyncNo)
	}
	if c.InMemory && (c.LogStore != "" || c.Fsync != "") {
		bad("InMemory", "keeps no log on disk: LogStore and Fsync must be empty")
	}
	if len(c.Peers) > 0 {
		if c.NoBootstrap {
			bad("NoBootstrap", "contradicts Peers: a node with Peers bootstraps them")
		}
		ids := make([]string, 0, len(c.Peers))
		for id := range c.Peers {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		addrs := make(map[string]string, len(ids))
		for _, id := range ids {
			addr := c.Peers[id]
			switch {
			case id == "" || strings.ContainsAny(id, "=, \t\r\n"):
				bad("Peers", "bad id %q", id)
			case checkHostPort(addr) != nil:
				bad("Peers", "%s: %v", id, checkHostPort(addr))
			case addrs[addr] != "":
				bad("Peers", "%s and %s share the address %q", addrs[addr], id, addr)
			}
			addrs[addr] = id
		}
		if own, ok := c.Peers[c.ID]; !ok {
			bad("Peers", "must include this node's ID %q", c.ID)
		} else if adv := c.raftAdvertise(); adv != "" && own != adv {
			bad("Peers", "%s=%s, but this node's Raft address is %s", c.ID, own, adv)
		}
		if port(c.RaftAddr) == 0 && c.RaftAdvertise == "" && c.RaftAddr != "" {
			bad("RaftAddr", "port 0 is only for a single node: the peers must know the port")
		}
	}
	durations := []struct {
		name string
		d    time.Duration
		min  time.Duration
	}{
		{"ClusterTimeout", c.ClusterTimeout, 10 * time.Millisecond},
		{"SnapshotInterval", c.SnapshotInterval, 5 * time.Millisecond},
		{"SweepInterval", c.SweepInterval, time.Millisecond},
		{"HeartbeatTimeout", c.HeartbeatTimeout, 5 * time.Millisecond},
		{"ElectionTimeout", c.ElectionTimeout, 5 * time.Millisecond},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout, 5 * time.Millisecond},
	}
	for _, d := range durations {
		if d.d != 0 && d.d < d.min {
			bad(d.name, "%v is below the minimum %v", d.d, d.min)
		}
	}
	ints := []struct {
		name     string
		v        int
		min, max int
	}{
		{"MaxBatchOps", c.MaxBatchOps, 1, 1 << 20},
		{"MaxBatchBytes", c.MaxBatchBytes, 1 << 10, 64 << 20},
		{"MaxInflight", c.MaxInflight, 1, 1024},
		{"ForwardConns", c.ForwardConns, 1, 64},
		{"BatchFill", c.BatchFill, 1, 1 << 20},
		{"SnapshotRetain", c.SnapshotRetain, 1, 1000},
		{"SweepKeys", c.SweepKeys, 1, 1 << 30},
	}
	for _, f := range ints {
		if f.v != 0 && (f.v < f.min || f.v > f.max) {
			bad(f.name, "%d is outside [%d, %d]", f.v, f.min, f.max)
		}
	}
	if c.SnapshotThreshold > 1<<40 {
		bad("SnapshotThreshold", "%d is absurdly large", c.SnapshotThreshold)
	}
	c.validateDialMap(bad)
	d := c.withDefaults()
	if d.LeaderLeaseTimeout > d.HeartbeatTimeout {
		bad("LeaderLeaseTimeout", "%v exceeds HeartbeatTimeout %v", d.LeaderLeaseTimeout, d.HeartbeatTimeout)
	}
	if d.ElectionTimeout < d.HeartbeatTimeout {
		bad("ElectionTimeout", "%v is below HeartbeatTimeout %v", d.ElectionTimeout, d.HeartbeatTimeout)
	}
	return errors.Join(errs...)
}

// withDefaults returns a copy with every unset optional field set.
func (c Config) withDefaults() Config {
	if !c.InMemory {
		setDefault(&c.Fsync, FsyncAlways)
	}
	setDefault(&c.ClusterTimeout, DefaultClusterTimeout)
	setDefault(&c.MaxBatchOps, DefaultMaxBatchOps)
	setDefault(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	setDefault(&c.MaxInflight, DefaultMaxInflight)
	setDefault(&c.BatchFill, max(1, c.MaxBatchOps/4))
	setDefault(&c.ForwardConns, DefaultForwardConns)
	setDefault(&c.SnapshotThreshold, DefaultSnapshotThreshold)
	setDefault(&c.SnapshotInterval, DefaultSnapshotInterval)
	setDefault(&c.SnapshotRetain, DefaultSnapshotRetain)
	setDefault(&c.SweepInterval, DefaultSweepInterval)
	setDefault(&c.SweepKeys, DefaultSweepKeys)
	rd := raft.DefaultConfig()
	setDefault(&c.HeartbeatTimeout, rd.HeartbeatTimeout)
	setDefault(&c.ElectionTimeout, max(rd.ElectionTimeout, c.HeartbeatTimeout))
	setDefault(&c.LeaderLeaseTimeout, min(rd.LeaderLeaseTimeout, c.HeartbeatTimeout))
	setDefault(&c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixNano() }
	}
	if c.Network == nil {
		c.Network = peer.TCPNetwork{TLS: c.TLS, T: peer.NewTimeouts(c.ClusterTimeout, c.HeartbeatTimeout)}
	}
	if c.ForwardAddr == "" {
		c.ForwardAddr = "127.0.0.1:0"
		if host, p, err := net.SplitHostPort(c.RaftAddr); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n != 0 && n+forwardPortOffset <= 65535 {
				c.ForwardAddr = net.JoinHostPort(host, strconv.Itoa(n+forwardPortOffset))
			} else if err == nil && n == 0 {
				c.ForwardAddr = net.JoinHostPort(host, "0")
			}
		}
		if unspecified(c.ForwardAddr) && c.ForwardAdvertise == "" && c.RaftAdvertise != "" {
			if host, _, err := net.SplitHostPort(c.RaftAdvertise); err == nil {
				c.ForwardAdvertise = net.JoinHostPort(host, strconv.Itoa(port(c.ForwardAddr)))
			}
		}
	}
	return c
}

// setDefault sets *field to def when it is unset (zero).
func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// raftAdvertise is the Raft address the others dial ("" while unknown,
// for port 0).
func (c *Config) raftAdvertise() string {
	switch {
	case c.RaftAdvertise != "":
		return c.RaftAdvertise
	case port(c.RaftAddr) == 0:
		return ""
	}
	return c.RaftAddr
}

func checkHostPort(addr string) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	_ = host
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: bad port %q", addr, p)
	}
	return nil
}

// unspecified reports whether addr's host is empty or 0.0.0.0/::.
func unspecified(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func port(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// validateDialMap names what is wrong with c.DialMap.
func (c *Config) validateDialMap(bad func(field, format string, args ...any)) {
	if len(c.DialMap) == 0 {
		return
	}
	if c.TLS != nil {
		bad("DialMap", "is for tests over plain TCP, not with TLS")
	}
	for from, to := range c.DialMap {
		if err := checkHostPort(from); err != nil {
			bad("DialMap", "%v", err)
		}
		if err := checkHostPort(to); err != nil {
			bad("DialMap", "%s: %v", from, err)
		}
	}
}
