package cluster

import (
	"testing"
	"time"
)

// TestBacklogHold: an entry with nothing in flight waits for as many
// requests as the last entry answered, at most twice that entry's commit
// time and maxBackHold, counted from when it was answered.
func TestBacklogHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name    string
		bl      backlog
		elapsed time.Duration
		want    time.Duration
	}{
		{"all came back", backlog{expect: 3, arrived: 3, commit: time.Millisecond}, 0, 0},
		{"more came than expected", backlog{expect: 3, arrived: 5, commit: time.Millisecond}, 0, 0},
		{"nothing expected", backlog{}, 0, 0},
		{"waiting, twice the commit", backlog{expect: 3, arrived: 1, commit: time.Millisecond}, 500 * time.Microsecond, 1500 * time.Microsecond},
		{"capped by maxBackHold", backlog{expect: 3, arrived: 1, commit: 10 * time.Millisecond}, time.Millisecond, maxBackHold - time.Millisecond},
		{"waited long enough", backlog{expect: 3, arrived: 1, commit: time.Millisecond}, 3 * time.Millisecond, 0},
	}
	for _, tc := range tests {
		bl := tc.bl
		bl.since = t0
		if got := bl.hold(t0.Add(tc.elapsed)); got != tc.want {
			t.Errorf("%s: hold %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReturnCap: once a wait ran out with only some callers back, the next
// entries expect no more than came back, and every backProbeEvery-th
// entry expects them all again.
func TestReturnCap(t *testing.T) {
	rc := returnCap{came: -1}
	if got := rc.expect(50); got != 50 {
		t.Fatalf("no cap yet: expect %d, want 50", got)
	}
	rc.ranOut(20)
	for i := 1; i < backProbeEvery; i++ {
		if got := rc.expect(50); got != 20 {
			t.Fatalf("entry %d after the wait ran out: expect %d, want 20", i, got)
		}
	}
	if got := rc.expect(50); got != 50 {
		t.Fatalf("probe: expect %d, want all 50", got)
	}
	if got := rc.expect(50); got != 50 {
		t.Fatalf("after a probe that did not run out: expect %d, want 50", got)
	}
	rc.ranOut(0)
	if got := rc.expect(50); got != 0 {
		t.Fatalf("none came back: expect %d, want 0 (no wait)", got)
	}
}
