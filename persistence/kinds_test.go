package persistence

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// TestKindBounds: the current format holds every kind of the engine's
// table of kinds and nothing beyond it; the older versions keep theirs.
func TestKindBounds(t *testing.T) {
	for _, c := range []struct {
		version uint64
		max     byte
	}{{1, 6}, {2, 7}, {Version, byte(engine.NumKinds - 1)}} {
		if got := maxKindIn(c.version); got != c.max {
			t.Errorf("version %d holds kinds up to %d, want %d", c.version, got, c.max)
		}
	}
	if maxKindIn(Version) != byte(engine.KindString) {
		t.Errorf("version %d's last kind moved from string (%d) to %d: a new kind needs a new format version (format.go's maxKind)",
			Version, engine.KindString, maxKindIn(Version))
	}
	for k := engine.KindNone; k <= engine.NumKinds; k++ {
		err := checkRecord(engine.Record{Key: []byte("k"), Rule: engine.Rule{Kind: k}})
		refused := err != nil && strings.Contains(err.Error(), "is not a limiter kind")
		if want := k == engine.KindNone || k == engine.NumKinds; refused != want {
			t.Errorf("kind %d: refused %v (%v), want %v", k, refused, err, want)
		}
	}
}
