package peer

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// Dial maps, for fault-injection tests only.
//
// To cut one link between two nodes and leave the others up, a test
// (cmd/sluice-chaos) runs a TCP proxy per ordered pair of nodes and gives
// each node a Config.DialMap (cluster) from the peers' addresses to the
// proxies that node must go through. Raft dials a peer by its ID: the
// transport's raft.ServerAddressProvider looks the ID up in Peers, then in
// the map. A follower dials the leader's advertised forward address:
// cluster's route maps it the same way (MapAddr). Everything else (the
// addresses in the log, bootstrap, RAFT.STATUS) still names the real
// addresses.

// DialMap is the raft.ServerAddressProvider of a node with a dial map
// (cluster's Config.DialMap).
type DialMap struct {
	Peers map[string]string // the node's peers: ID -> Raft address
	Dial  map[string]string // address -> the address to dial instead
}

// ServerAddr returns the address to dial for server id. An ID outside
// Peers (a server added later with RAFT.JOIN) is an error, on which raft
// dials the address in its configuration.
func (p DialMap) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	addr, ok := p.Peers[string(id)]
	if !ok {
		return "", fmt.Errorf("cluster: dial map: %q is not in Peers", id)
	}
	return raft.ServerAddress(MapAddr(p.Dial, addr)), nil
}

// MapAddr returns the address to dial for addr.
func MapAddr(m map[string]string, addr string) string {
	if to, ok := m[addr]; ok {
		return to
	}
	return addr
}
