package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/cluster"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/resp"
)

// newExecutor starts what stands behind the RESP server: a single durable
// Raft voter by default, the engine alone with --in-memory, a cluster with
// --peers (with Raft's in-memory stores when --in-memory): one Raft group
// per engine (--shards). respAddr is the RESP address actually bound. It
// returns the executor, a function that stops it, and whether state is
// durable.
func newExecutor(ctx context.Context, cfg *config, engines []*engine.Engine, respAddr string, log *slog.Logger) (resp.Executor, func(), bool, error) {
	peers, err := parsePeers(cfg.Peers)
	if err != nil {
		return nil, nil, false, err
	}
	if cfg.InMemory && len(peers) == 0 && !cfg.NoBootstrap {
		// Nothing to replicate and nothing to persist: the engine itself
		// is the executor, with no log in between.
		local := resp.NewLocalExecutor(engines[0], nil) // validated: one group
		sweepCtx, cancel := context.WithCancel(ctx)
		go local.RunSweeper(sweepCtx, 100*time.Millisecond, 4096)
		log.Info("single node in memory: state is lost on restart")
		return local, cancel, false, nil
	}
	id := cfg.ID
	if id == "" { // validated: only without --peers
		id = "node1"
	}
	raftAddr := cfg.RaftAddr
	if raftAddr == "" {
		if p, ok := peers[id]; ok {
			raftAddr = p
		} else if raftAddr, err = offsetPort(respAddr, 1000); err != nil {
			return nil, nil, false, fmt.Errorf("--raft-addr: derive from --addr: %w", err)
		} else if host, port, _ := net.SplitHostPort(raftAddr); host == "" || net.ParseIP(host).IsUnspecified() {
			raftAddr = net.JoinHostPort("127.0.0.1", port) // as --raft-addr's help says
		}
	}
	peerTLS, err := cfg.peerTLSConfig()
	if err != nil {
		return nil, nil, false, err
	}
	if peerTLS == nil {
		// A --raft-addr or --peers address was checked with the settings;
		// this one may be derived from --addr.
		if err := checkPrivate(raftAddr); err != nil {
			return nil, nil, false, fmt.Errorf("%s: the Raft address derived from it: %w", cfg.setting("addr"), err)
		}
	}
	if cfg.debugConfig.active() {
		log.Warn("test-only flags set", "debug_dial_map", cfg.DialMap, "debug_clock_skew", cfg.ClockSkew)
	}
	dataDir, logStore, fsync := cfg.DataDir, cfg.RaftLog.value, cfg.Fsync.value
	if cfg.InMemory {
		// --data-dir's default names nothing to keep, and with nothing on
		// disk there is no log store and nothing to flush.
		dataDir, logStore, fsync = "", "", ""
	} else if logStore == "" {
		if logStore, err = cluster.ResolveLogStore(dataDir); err != nil {
			return nil, nil, false, err
		}
		cfg.RaftLog.value = logStore // INFO persistence reports it
	}
	host, err := cluster.NewHost(ctx, cluster.Config{
		ID:             id,
		RaftAddr:       raftAddr,
		RESPAddr:       advertisedRESP(respAddr, raftAddr),
		ForwardAddr:    cfg.ForwardAddr,
		DataDir:        dataDir,
		InMemory:       cfg.InMemory,
		LogStore:       logStore,
		Fsync:          fsync,
		Peers:          peers,
		NoBootstrap:    cfg.NoBootstrap,
		ClusterTimeout: cfg.ClusterTimeout,
		Logger:         log,
		TLS:            peerTLS,
		DialMap:        cfg.DialMap,
		Now:            cfg.debugConfig.wallClock(),
	}, engines)
	if err != nil {
		return nil, nil, false, fmt.Errorf("start cluster node: %w", err)
	}
	stop := func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := host.Close(closeCtx); err != nil {
			log.Warn("closing the cluster node", "err", err)
		}
	}
	return host, stop, !cfg.InMemory, nil
}

// parsePeers parses --peers: id=host:port,id=host:port,...
func parsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return peers, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("id %q appears twice", id)
		}
		peers[id] = addr
	}
	return peers, nil
}

// offsetPort returns addr with its port moved by delta; port 0 stays 0.
func offsetPort(addr string, delta int) (string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", fmt.Errorf("port %q: %w", portStr, err)
	}
	if port != 0 {
		port += delta
	}
	if port > 65535 {
		return "", fmt.Errorf("port %d + %d is beyond 65535", port-delta, delta)
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// advertisedRESP is the RESP address a node announces to the cluster (what
// CLUSTER SLOTS and RAFT.STATUS report): the bound address, except that an
// unspecified IP (--addr 0.0.0.0:6379) is replaced by the host of the Raft
// address, which the other nodes reach this one at.
func advertisedRESP(respAddr, raftAddr string) string {
	host, port, err := net.SplitHostPort(respAddr)
	if err != nil || (host != "" && !net.ParseIP(host).IsUnspecified()) {
		return respAddr
	}
	raftHost, _, err := net.SplitHostPort(raftAddr)
	if err != nil || raftHost == "" || net.ParseIP(raftHost).IsUnspecified() {
		return respAddr
	}
	return net.JoinHostPort(raftHost, port)
}
