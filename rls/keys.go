package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/sluice-rl/sluice/rls/rules"
)

// CounterKey appends to dst the engine key of a descriptor's counter, as
// envoyproxy/ratelimit names its cache keys: the domain, each entry's key
// and value (a share_threshold entry's wildcard pattern instead of its
// value), then the unit, and the algorithm when it is not fixed:
//
//	{api}|remote_address=10.0.0.1|hour
//	{api}|tenant=t1|plan=gold|week|token
//
// The domain is the key's Redis Cluster hash tag, so every counter of a
// domain is in one slot and one Raft group, and one request is one atomic
// step even with --shards above 1. A domain holding '{' or '}' (which would
// end the tag early) is tagged with a hash of its name instead. Keys and
// values are escaped ('\', '|', '=' get a backslash) so that no two
// descriptors share a key. The window is not in the key: the engine's
// fixed window restarts at every epoch-aligned unit by itself.
func CounterKey(dst []byte, domain string, entries []rules.Entry, share []string, l *rules.Limit) []byte {
	dst = append(dst, '{')
	dst = append(dst, HashTag(domain)...)
	dst = append(dst, '}')
	for i, e := range entries {
		dst = append(dst, '|')
		dst = appendEscaped(dst, e.Key)
		dst = append(dst, '=')
		v := e.Value
		if i < len(share) && share[i] != "" {
			v = share[i]
		}
		dst = appendEscaped(dst, v)
	}
	dst = append(dst, '|')
	dst = append(dst, l.Unit.String()...)
	if l.Algorithm != rules.Fixed && !l.Override {
		dst = append(dst, '|')
		dst = append(dst, l.Algorithm.String()...)
	}
	return dst
}

// HashTag returns the hash tag of a domain's keys: the domain itself, or
// "rls-" and the first 16 hex digits of its SHA-256 when it holds a brace.
func HashTag(domain string) string {
	if !strings.ContainsAny(domain, "{}") {
		return domain
	}
	h := sha256.Sum256([]byte(domain))
	return "rls-" + hex.EncodeToString(h[:8])
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '|', '=':
			dst = append(dst, '\\', c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
