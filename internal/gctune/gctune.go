// Package gctune keeps the Go garbage collector's headroom (how far the heap
// may grow past the live heap before the next collection) at least a minimum
// number of bytes, on top of a fixed GC percent.
//
// A low GC percent keeps the heap near its live size, which is what a
// process holding a large, cheap-to-scan heap wants. But with a small live
// heap the same percent leaves only a few MiB of headroom, and a process
// that allocates per request then collects many times a second. After every
// collection a Tuner sets the GC percent to
//
//	max(Base, min(Max, ceil(MinHeadroom*100/live)))
//
// where live is the live heap the collection found: Base once the live heap
// is large (MinHeadroom*100/Base bytes or more), more below that, so that
// the headroom is at least MinHeadroom (up to the Max percent).
//
// The runtime applies the GC percent to the live heap plus the goroutine
// stacks and globals, so the headroom is a little more than the computation
// above assumes, never less.
package gctune

import (
	"context"
	"errors"
	"math/bits"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultMax is the GC percent a Tuner sets at most when Config.Max is 0.
const DefaultMax = 1000

// Config is a Tuner's settings.
type Config struct {
	// Base is the GC percent when the live heap is large: the least the
	// Tuner sets. It must be positive.
	Base int
	// MinHeadroom is the least headroom, in bytes, the Tuner aims for.
	// It must be positive.
	MinHeadroom int64
	// Max is the most GC percent the Tuner sets (DefaultMax when 0). When
	// Base is larger, Base wins.
	Max int
}

// Percent returns the GC percent that gives a live heap of liveHeap bytes
// at least minHeadroom bytes of headroom, ceil(minHeadroom*100/liveHeap),
// capped at maxPercent and then raised to base (so base wins over
// maxPercent). A liveHeap of 0 or less (before the first collection) asks
// for maxPercent; a minHeadroom of 0 or less for base.
func Percent(base int, minHeadroom, liveHeap int64, maxPercent int) int {
	want := maxPercent
	if minHeadroom <= 0 {
		want = 0
	} else if liveHeap > 0 {
		// minHeadroom*100 may not fit in 64 bits: divide the 128-bit
		// product; a quotient that does not fit is more than maxPercent
		// anyway.
		hi, lo := bits.Mul64(uint64(minHeadroom), 100)
		if hi < uint64(liveHeap) {
			q, r := bits.Div64(hi, lo, uint64(liveHeap))
			if r != 0 {
				q++
			}
			if q < uint64(maxPercent) {
				want = int(q)
			}
		}
	}
	if want < base {
		want = base
	}
	return want
}

// A Tuner adjusts the GC percent after every collection until it is
// stopped. Only one Tuner should run in a process, and nothing else should
// set the GC percent while it runs.
type Tuner struct {
	cfg     Config
	gc      chan struct{} // a collection finished
	stop    chan struct{} // closed by Stop
	done    chan struct{} // closed when run returns
	once    sync.Once
	samples []metrics.Sample
}

// sentinel is allocated unreachable with a cleanup attached, so that its
// cleanup runs after the next collection. It is big enough and pointer-free
// so that the allocator never batches it with other objects, which could
// keep it alive.
type sentinel [64]byte

// Start sets the GC percent from the current live heap and starts a Tuner
// that sets it again after every collection, until ctx is done or Stop is
// called. It returns an error if cfg is invalid.
func Start(ctx context.Context, cfg Config) (*Tuner, error) {
	if cfg.Max == 0 {
		cfg.Max = DefaultMax
	}
	switch {
	case cfg.Base <= 0:
		return nil, errors.New("gctune: Base must be positive")
	case cfg.MinHeadroom <= 0:
		return nil, errors.New("gctune: MinHeadroom must be positive")
	case cfg.Max < 0:
		return nil, errors.New("gctune: Max must not be negative")
	}
	t := &Tuner{
		cfg:     cfg,
		gc:      make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
	}
	t.adjust()
	t.arm()
	go t.run(ctx)
	return t, nil
}

// Stop stops the Tuner, waits until it has stopped and sets the GC percent
// back to Config.Base. It may be called more than once, and after ctx is
// done.
func (t *Tuner) Stop() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

// Done returns a channel closed once the Tuner has stopped (its context is
// done or Stop was called) and has set the GC percent back to Config.Base.
func (t *Tuner) Done() <-chan struct{} { return t.done }

// run adjusts the GC percent after each collection until ctx is done or
// Stop is called, then restores Base.
func (t *Tuner) run(ctx context.Context) {
	defer close(t.done)
	for {
		select {
		case <-ctx.Done():
			debug.SetGCPercent(t.cfg.Base)
			return
		case <-t.stop:
			debug.SetGCPercent(t.cfg.Base)
			return
		case <-t.gc:
			t.adjust()
		}
	}
}

// adjust sets the GC percent for the live heap of the last collection (0
// before the first one). Should the runtime not report the live heap, it
// sets Base. It sets the percent even when unchanged, which is cheap once
// per collection, so that the Tuner corrects any other setting.
func (t *Tuner) adjust() {
	metrics.Read(t.samples)
	p := t.cfg.Base
	if s := t.samples[0]; s.Value.Kind() == metrics.KindUint64 {
		live := int64(min(s.Value.Uint64(), 1<<62))
		p = Percent(t.cfg.Base, t.cfg.MinHeadroom, live, t.cfg.Max)
	}
	debug.SetGCPercent(p)
}

// arm allocates a sentinel whose cleanup runs after the next collection.
func (t *Tuner) arm() {
	runtime.AddCleanup(new(sentinel), (*Tuner).collected, t)
}

// collected runs on the runtime's cleanup goroutine once a sentinel has
// been collected: it wakes run without blocking and, unless the Tuner has
// stopped, arms the next sentinel.
func (t *Tuner) collected() {
	select {
	case <-t.done:
		return
	default:
	}
	select {
	case t.gc <- struct{}{}:
	default: // run has not taken the last one yet; one wake-up is enough
	}
	t.arm()
}
