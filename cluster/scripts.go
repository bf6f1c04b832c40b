package cluster

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/cursor"
	"github.com/sluice-rl/sluice/persistence"
)

// The script cache (engine/scripts.go) is replicated state, so snapshots
// carry it: its bodies, in SHA1 order, each as a uvarint length and the
// bytes, one stream cut into meta pairs "scripts.<i>" of at most
// persistence.MaxMetaLen bytes (the cache's 64 MiB bound needs about a
// thousand of the header's 4096 pairs). The pairs exist only when scripts
// do, and only a cluster of version 3 has scripts, so an older node never
// meets them (it would ignore them: header keys it does not know).
const metaScriptsPfx = "scripts."

// scriptsMeta encodes bodies as meta pairs.
func scriptsMeta(bodies [][]byte) [][2]string {
	if len(bodies) == 0 {
		return nil
	}
	var stream []byte
	for _, b := range bodies {
		stream = binary.AppendUvarint(stream, uint64(len(b)))
		stream = append(stream, b...)
	}
	var out [][2]string
	for i := 0; len(stream) > 0; i++ {
		n := min(len(stream), persistence.MaxMetaLen)
		out = append(out, [2]string{metaScriptsPfx + strconv.Itoa(i), string(stream[:n])})
		stream = stream[n:]
	}
	return out
}

// restoreScripts decodes the script bodies of a snapshot's meta pairs
// (nil when it has none).
func restoreScripts(meta [][2]string) ([][]byte, error) {
	var stream []byte
	next := 0
	for _, kv := range meta {
		if !strings.HasPrefix(kv[0], metaScriptsPfx) {
			continue
		}
		if kv[0] != metaScriptsPfx+strconv.Itoa(next) {
			return nil, fmt.Errorf("script chunk %q out of order (want %d)", kv[0], next)
		}
		next++
		stream = append(stream, kv[1]...)
	}
	var bodies [][]byte
	c := cursor.New(stream, persistence.ErrCorrupt, "read")
	for len(c.B) > 0 && c.Err == nil {
		if b := c.Bytes(persistence.MaxFrameLen); c.Err == nil {
			bodies = append(bodies, b)
		}
	}
	if c.Err != nil {
		return nil, fmt.Errorf("scripts: %w", c.Err)
	}
	return bodies, nil
}
