package persistence

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// TestKindBounds: each format version holds the kinds it was released with
// (a build of a version refuses a kind above them, so a new kind needs a
// new version: format.go's maxKind), and the current one every kind of the
// engine's table of kinds and nothing beyond it.
func TestKindBounds(t *testing.T) {
	released := map[uint64]byte{1: 6, 2: 7, 3: 8, 4: 8} // version: its last kind
	for v := uint64(minVersion); v <= Version; v++ {
		if got := maxKindIn(v); got != released[v] {
			t.Errorf("version %d holds kinds up to %d, released with %d: a new kind needs a new format version (format.go's maxKind)", v, got, released[v])
		}
	}
	if got := maxKindIn(Version); got != byte(engine.NumKinds-1) {
		t.Errorf("version %d holds kinds up to %d, the engine's last is %d", Version, got, engine.NumKinds-1)
	}
	for k := engine.KindNone; k <= engine.NumKinds; k++ {
		err := checkRecord(engine.Record{Key: []byte("k"), Rule: engine.Rule{Kind: k}})
		refused := err != nil && strings.Contains(err.Error(), "is not a limiter kind")
		if want := k == engine.KindNone || k == engine.NumKinds; refused != want {
			t.Errorf("kind %d: refused %v (%v), want %v", k, refused, err, want)
		}
	}
}
