package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// clock is the engine's decision clock.
//
// Its time for a wall time w is FrozenAt when frozen, else w + Offset, and
// then never less than Last, the latest time handed out. Readers are
// lock-free: the settings are immutable values behind an atomic pointer,
// replaced (under mu, which only the clock operations take) by a clock op, and
// Last is advanced with a compare-and-swap max loop. mu is never held together
// with a stripe lock.
type clock struct {
	mu       sync.Mutex
	settings atomic.Pointer[clockSettings]
	last     atomic.Int64
}

// clockSettings is one immutable configuration of the clock.
type clockSettings struct {
	offset   int64
	frozen   bool
	frozenAt int64
}

func (c *clock) init() {
	c.settings.Store(&clockSettings{})
}

// raw is the clock's time for wall before the max with Last.
func (c *clock) raw(wall int64) int64 {
	s := c.settings.Load()
	if s.frozen {
		return s.frozenAt
	}
	return satAdd(wall, s.offset)
}

// advance raises Last to t if it is later and returns max(t, Last).
func (c *clock) advance(t int64) int64 {
	for {
		l := c.last.Load()
		if t <= l {
			return l
		}
		if c.last.CompareAndSwap(l, t) {
			return t
		}
	}
}

// now hands out the clock's time for wall, recording it in Last.
func (c *clock) now(wall int64) int64 { return c.advance(c.raw(wall)) }

// peek is now without recording: it never returns less than Last but does
// not raise it, so that reads (TIME) cannot change what replicas compute.
func (c *clock) peek(wall int64) int64 { return max(c.raw(wall), c.last.Load()) }

// warp advances the clock by ns from its current time (DEBUG TIMEWARP),
// whatever wall time did since.
func (c *clock) warp(wall, ns int64) error {
	if ns < 0 {
		return badRule("time warp of %d ns: the clock never goes backwards", ns)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := satAdd(c.now(wall), ns)
	s := *c.settings.Load()
	if s.frozen {
		s.frozenAt = t
	} else {
		s.offset = t - wall
	}
	c.settings.Store(&s)
	c.advance(t)
	return nil
}

// freeze stops the clock at 'at', or at its current time when at is 0.
func (c *clock) freeze(wall, at int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.now(wall)
	if at == 0 {
		at = cur
	} else if at < cur {
		return &errcode.Error{Code: errcode.ClockBackwards, Detail: fmt.Sprintf("freeze at %d ns, clock at %d ns", at, cur)}
	}
	s := *c.settings.Load()
	s.frozen, s.frozenAt = true, at
	c.settings.Store(&s)
	c.advance(at)
	return nil
}

// resume lets a frozen clock run again from the instant it was frozen at.
func (c *clock) resume(wall int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.settings.Load()
	if !s.frozen {
		return
	}
	s.offset = s.frozenAt - wall
	s.frozen, s.frozenAt = false, 0
	c.settings.Store(&s)
}

func (c *clock) state() ClockState {
	s := c.settings.Load()
	return ClockState{Offset: s.offset, Frozen: s.frozen, FrozenAt: s.frozenAt, Last: c.last.Load()}
}

func (c *clock) setState(cs ClockState) {
	c.mu.Lock()
	c.settings.Store(&clockSettings{offset: cs.Offset, frozen: cs.Frozen, frozenAt: cs.FrozenAt})
	c.last.Store(cs.Last)
	c.mu.Unlock()
}
