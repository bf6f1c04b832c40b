package resp

import (
	"encoding/hex"
	"strconv"
)

// runDebugDigest replies DEBUG DIGEST: a hash of this replica's own engine
// state and its key count, "<64 hex digits> <keys>" (engine.Digest). It
// reads the local engine without going through the log, so that a test
// can compare replicas once they have applied the same entries (the chaos
// suite does, after healing). Needs Config.Engine.
func runDebugDigest(s *Server, c *client) {
	if s.cfg.Engine == nil {
		c.local.Error(msgNoDigest.Text())
		return
	}
	sum, keys := s.cfg.Engine.Digest()
	c.local.BulkString(hex.EncodeToString(sum[:]) + " " + strconv.Itoa(keys))
}
