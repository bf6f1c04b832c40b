package cluster

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// Dial maps, for fault-injection tests only.
//
// To cut one link between two nodes and leave the others up, a test
// (cmd/sluice-chaos) runs a TCP proxy per ordered pair of nodes and gives
// each node a Config.DialMap from the peers' addresses to the proxies that
// node must go through. Raft dials a peer by its ID: the transport's
// raft.ServerAddressProvider looks the ID up in Peers, then in the map. A
// follower dials the leader's advertised forward address: route maps it the
// same way. Everything else (the addresses in the log, bootstrap, RAFT.STATUS)
// still names the real addresses.

// dialMapProvider is the raft.ServerAddressProvider of a node with a
// DialMap.
type dialMapProvider struct {
	peers map[string]string
	dial  map[string]string
}

// ServerAddr returns the address to dial for server id. An ID outside
// Peers (a server added later with RAFT.JOIN) is an error, on which raft
// dials the address in its configuration.
func (p dialMapProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	addr, ok := p.peers[string(id)]
	if !ok {
		return "", fmt.Errorf("cluster: dial map: %q is not in Peers", id)
	}
	return raft.ServerAddress(mapAddr(p.dial, addr)), nil
}

// mapAddr returns the address to dial for addr.
func mapAddr(m map[string]string, addr string) string {
	if to, ok := m[addr]; ok {
		return to
	}
	return addr
}

// validateDialMap names what is wrong with c.DialMap.
func (c *Config) validateDialMap(bad func(field, format string, args ...any)) {
	if len(c.DialMap) == 0 {
		return
	}
	if c.TLS != nil {
		bad("DialMap", "is for tests over plain TCP, not with TLS")
	}
	if c.Transport != nil {
		bad("DialMap", "has no effect with a Transport")
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
