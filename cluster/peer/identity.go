package peer

import (
	"bufio"
	"fmt"
	"io"
)

// A cluster identity (docs/operations.md, "Backup and restore").
//
// A cluster made by `sluice restore` has an identity: an id the restore
// writes into every new node's data dir (persistence.ClusterID). Its nodes
// open every Raft stream and every forwarding connection with it
// (ClusterHello), and accept only streams and connections that carry the
// same one; nodes without an identity (every cluster not made by a
// restore) send none and refuse any stream that carries one. So a restored
// node and a node of the cluster the backup came from never talk, even
// when one uses an address the other's configuration still names: the old
// leader cannot make a restored node its follower, and no command is
// forwarded from one cluster to the other. Raft's own RPCs start with a
// type byte from 0 to 4, the group header with 'G', the forwarding hellos
// with 'S': the identity's 'C' is none of them.

// clusterMarker opens a cluster identity on a Raft stream or forwarding
// connection.
const clusterMarker = 'C'

// maxClusterID bounds an identity's length.
const maxClusterID = 64

// ClusterHello is what a node of cluster id sends first: nothing without
// an identity, else the marker, the id's length and the id.
func ClusterHello(id string) []byte {
	if id == "" {
		return nil
	}
	return append([]byte{clusterMarker, byte(len(id))}, id...)
}

// ReadClusterHello reads the identity a stream opens with, if any, and
// checks it against ours: nil when they are the same (both none
// included).
func ReadClusterHello(br *bufio.Reader, ours string) error {
	first, err := br.Peek(1)
	if err != nil {
		return err
	}
	theirs := ""
	if first[0] == clusterMarker {
		var hdr [2]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		if hdr[1] == 0 || hdr[1] > maxClusterID {
			return fmt.Errorf("a cluster identity of %d bytes", hdr[1])
		}
		id := make([]byte, hdr[1])
		if _, err := io.ReadFull(br, id); err != nil {
			return err
		}
		theirs = string(id)
	}
	if theirs != ours {
		return fmt.Errorf("a node of another cluster (identity %q, this cluster's %q): a cluster restored from a backup and the one the backup came from never talk", theirs, ours)
	}
	return nil
}
