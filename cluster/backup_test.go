package cluster

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/persistence"
)

// TestNodeBackup: the leader's backup holds every decision acknowledged
// before it (its digest is the leader's engine's, taken while nothing
// applies), at an applied index no lower than the last acknowledged
// entry's; a follower refuses, naming the leader.
func TestNodeBackup(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	rule := engine.Rule{Kind: engine.KindFixed, Limit: 100, Period: 3600e9}
	for i := range 50 {
		exec(t, tc.nodes[(l+i)%3], decide("k"+string(rune('a'+i%26))+string(rune('a'+i/26)), rule, 1))
	}
	applied := tc.nodes[l].fsm.applied.Load()
	snap, err := tc.nodes[l].Backup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Index < applied || snap.LockStripes != tc.nodes[l].eng.NumStripes() {
		t.Fatalf("backup at index %d (applied %d before it), %d stripes", snap.Index, applied, snap.LockStripes)
	}
	_, sum, keys, err := persistence.DigestSnapshot(snap.Data, snap.LockStripes)
	if err != nil {
		t.Fatal(err)
	}
	want, wantKeys := tc.nodes[l].eng.Digest()
	if sum != want || keys != wantKeys || keys != 50 {
		t.Fatalf("backup digest %x (%d keys), the leader's %x (%d keys)", sum[:8], keys, want[:8], wantKeys)
	}
	f := (l + 1) % 3
	if _, err := tc.nodes[f].Backup(context.Background()); !errcode.Is(err, errcode.NotLeader) {
		t.Fatalf("backup on a follower: %v, want NotLeader", err)
	}
}
