package resp

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// LocalExecutor runs operations directly on an in-memory engine: a single
// node with nothing replicated and nothing on disk.
type LocalExecutor struct {
	eng  *engine.Engine
	wall WallClock
}

// WallClock returns the wall time in nanoseconds since the Unix epoch.
type WallClock func() int64

// MonotonicWall returns a wall clock that never goes backwards within the
// process: the wall time at creation plus the monotonic time elapsed since.
func MonotonicWall() WallClock {
	start := time.Now()
	base := start.UnixNano()
	return func() int64 { return base + int64(time.Since(start)) }
}

// NewLocalExecutor returns an executor over eng; wall defaults to
// MonotonicWall().
func NewLocalExecutor(eng *engine.Engine, wall WallClock) *LocalExecutor {
	if wall == nil {
		wall = MonotonicWall()
	}
	return &LocalExecutor{eng: eng, wall: wall}
}

// Execute runs ops on the engine at the current time. It never fails.
func (l *LocalExecutor) Execute(_ context.Context, ops []engine.Op, results []engine.Result) error {
	l.eng.Apply(l.wall(), ops, results)
	return nil
}

// RunSweeper reclaims state that is back at its initial state, a slice of
// the keyspace every interval, until ctx is done.
func (l *LocalExecutor) RunSweeper(ctx context.Context, interval time.Duration, keysPerTick int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.eng.Sweep(l.eng.Now(l.wall()), keysPerTick)
		}
	}
}
