package cluster

import (
	"sync"
	"time"
)

// timerPool recycles the deadline timers of calls (Execute's, and the
// forward server's per request): a timer per call was three allocations
// of a handful per call at one command per call.
//
// Reuse is safe because the module is built with Go 1.23+ timer semantics
// (go.mod's go line): once Stop or Reset returns, no value from before is
// ever received from the channel. A timer goes back only after its one
// user returned, so no goroutine is left receiving from its channel.
type timerPool struct{ p sync.Pool }

// get returns a timer that fires after d.
func (tp *timerPool) get(d time.Duration) *time.Timer {
	if t, ok := tp.p.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// put stops t and keeps it for a later get. Nothing may receive from t.C
// after this.
func (tp *timerPool) put(t *time.Timer) {
	t.Stop()
	tp.p.Put(t)
}
