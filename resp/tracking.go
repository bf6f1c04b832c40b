package resp

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Client-side caching (CLIENT TRACKING), as Redis 6+ does it in its default
// mode over RESP3: the server remembers which keys each tracking connection
// read with RL.PEEK, TYPE, EXISTS, PTTL or TTL, and when such a key's state
// changes it sends that connection the push `>2 invalidate [key]` and
// forgets the pair until the key is read again. FLUSHALL (and a snapshot
// restore) sends `>2 invalidate _` (every key) to every tracking connection.
//
// Where changes come from. The engine reports every key whose state may
// have changed to its Watcher, the Tracker; on a cluster that includes the
// followers, where the Raft log is applied to the engine. So a connection is
// invalidated by the node it is connected to, whichever node made the
// change.
//
// Ordering. A read's key is registered when the command is parsed, before
// its operations run, and pushes for a connection are held back while it
// has a pipeline in flight (the connection is busy), then written once its
// replies are. So an invalidation never reaches the client before the reply
// of a read that ran before the change: the client never keeps a stale
// value, at worst drops a fresh one.
//
// Delivery. Each tracking connection has a writer goroutine that writes its
// pending invalidations as soon as they exist, so an idle connection
// receives them without sending anything (rueidis reads them in the
// background). Pushes are written through the lockedConn's serialized Write,
// so they fall between whole replies.
//
// Memory. The table holds at most maxKeys (key, connection) pairs: beyond
// that, a random key is invalidated for all its readers and forgotten, as
// Redis does with tracking-table-max-keys. A connection holds at most
// maxPendingKeys undelivered invalidations: beyond that they are replaced by
// one invalidation of every key. Everything a connection holds is released
// when it turns tracking off, resets or closes.
//
// Locking. The engine tells the tracker of every change, so the table is
// split into trackStripes stripes by key hash, each with its own mutex: a
// decision takes one stripe's lock, never a lock shared by all keys. Lock
// order: stripe locks in ascending index order (only AllChanged holds more
// than one), then Tracker.connsMu, then a connection's tracking.mu. All are
// leaf locks with respect to the rest of the server: the engine calls in
// with a shard lock held, and nothing here calls out or does I/O while
// holding one (lockedConn's write mutex is taken only after they are
// released).

// DefaultTrackingMaxKeys is the default bound on the (key, connection) pairs
// the tracking table holds (Redis's tracking-table-max-keys default).
const DefaultTrackingMaxKeys = 1_000_000

// maxPendingKeys bounds the invalidations a connection holds undelivered.
const maxPendingKeys = 1024

// trackStripes is the number of lock stripes of the tracking table.
const trackStripes = 64

// Tracker is the server's half of client-side caching: the table of keys
// read by tracking connections. It implements engine.Watcher. Create one
// with NewTracker, pass it to engine.Config.Watcher and Config.Tracker.
type Tracker struct {
	maxKeys int64
	active  atomic.Int64 // tracking connections: the engine's calls return at once when 0
	pairs   atomic.Int64 // (key, connection) pairs in the stripes

	stripes [trackStripes]trackStripe

	connsMu sync.Mutex
	conns   map[*tracking]struct{} // every tracking connection
}

// trackStripe is one lock stripe of the tracking table.
type trackStripe struct {
	mu   sync.Mutex
	keys map[string]*watched // key -> the connections that read it
	_    [40]byte            // keep neighbouring stripes' locks off one cache line
}

// watched is a tracked key and the connections that read it since its
// last change.
type watched struct {
	key   string
	conns []*tracking
}

// NewTracker returns an empty tracking table holding at most maxKeys
// (key, connection) pairs (DefaultTrackingMaxKeys when maxKeys <= 0).
func NewTracker(maxKeys int) *Tracker {
	if maxKeys <= 0 {
		maxKeys = DefaultTrackingMaxKeys
	}
	t := &Tracker{maxKeys: int64(maxKeys), conns: make(map[*tracking]struct{})}
	for i := range t.stripes {
		t.stripes[i].keys = make(map[string]*watched)
	}
	return t
}

// Keys returns the number of (key, connection) pairs tracked.
func (t *Tracker) Keys() int { return int(t.pairs.Load()) }

// stripe returns key's stripe.
func (t *Tracker) stripe(key []byte) *trackStripe {
	return &t.stripes[xxhash.Sum64(key)%trackStripes]
}

// KeyChanged invalidates key for every connection that read it
// (engine.Watcher).
func (t *Tracker) KeyChanged(key []byte) {
	if t.active.Load() == 0 {
		return
	}
	st := t.stripe(key)
	st.mu.Lock()
	if w := st.keys[string(key)]; w != nil {
		t.invalidate(st, w)
	}
	st.mu.Unlock()
}

// AllChanged invalidates every key for every tracking connection
// (engine.Watcher).
func (t *Tracker) AllChanged() {
	if t.active.Load() == 0 {
		return
	}
	for i := range t.stripes {
		t.stripes[i].mu.Lock()
	}
	for i := range t.stripes {
		st := &t.stripes[i]
		for _, w := range st.keys {
			t.pairs.Add(-int64(len(w.conns)))
		}
		clear(st.keys)
	}
	t.connsMu.Lock()
	for c := range t.conns {
		c.mu.Lock()
		clear(c.keys)
		c.pending, c.flushAll = nil, true
		c.signal()
		c.mu.Unlock()
	}
	t.connsMu.Unlock()
	for i := range t.stripes {
		t.stripes[i].mu.Unlock()
	}
}

// invalidate forgets w and queues its invalidation for its readers (st.mu
// held).
func (t *Tracker) invalidate(st *trackStripe, w *watched) {
	delete(st.keys, w.key)
	t.pairs.Add(-int64(len(w.conns)))
	for _, c := range w.conns {
		c.mu.Lock()
		delete(c.keys, w.key)
		c.queue(w.key)
		c.mu.Unlock()
	}
}

// evictOne invalidates one key, picked at random, for all its readers.
func (t *Tracker) evictOne() {
	first := rand.IntN(trackStripes)
	for i := range trackStripes {
		st := &t.stripes[(first+i)%trackStripes]
		st.mu.Lock()
		for _, w := range st.keys {
			t.invalidate(st, w) // map order: a random key
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
	}
}

// tracking is one connection's tracking state.
type tracking struct {
	t *Tracker
	w io.Writer // the connection, whose Write is serialized (lockedConn)

	// Touched only by the connection's goroutine.
	optin, optout, noloop bool
	caching               int8 // CLIENT CACHING for the next command: 1 yes, -1 no

	mu       sync.Mutex          // guards the fields below
	keys     map[string]struct{} // the keys this connection is registered for
	pending  []string            // invalidations not yet written
	flushAll bool                // an invalidation of every key is pending
	busy     bool                // a pipeline is in flight: hold pushes back
	busyFrom int                 // len(pending) when the pipeline began
	closed   bool

	wake chan struct{} // capacity 1: pending work for the writer
	done chan struct{} // closed when tracking stops
}

// start turns tracking on for a connection that writes through w and starts
// its writer goroutine.
func (t *Tracker) start(w io.Writer) *tracking {
	// Started by a command, so inside a pipeline: busy until its end.
	c := &tracking{t: t, w: w, keys: make(map[string]struct{}), busy: true,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	t.connsMu.Lock()
	t.conns[c] = struct{}{}
	t.connsMu.Unlock()
	t.active.Add(1)
	go c.writer()
	return c
}

// stop turns tracking off: it forgets the connection's keys and undelivered
// invalidations and ends its writer.
func (c *tracking) stop() {
	t := c.t
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	keys := c.keys
	c.keys, c.pending = nil, nil
	c.mu.Unlock()
	for k := range keys {
		st := t.stripe([]byte(k))
		st.mu.Lock()
		if w := st.keys[k]; w != nil {
			for i, o := range w.conns {
				if o == c {
					last := len(w.conns) - 1
					w.conns[i] = w.conns[last]
					w.conns[last] = nil
					w.conns = w.conns[:last]
					t.pairs.Add(-1)
					break
				}
			}
			if len(w.conns) == 0 {
				delete(st.keys, k)
			}
		}
		st.mu.Unlock()
	}
	t.connsMu.Lock()
	delete(t.conns, c)
	t.connsMu.Unlock()
	t.active.Add(-1)
	close(c.done)
}

// signal wakes the writer (c.mu held).
func (c *tracking) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// queue adds an invalidation of key (c.mu held).
func (c *tracking) queue(key string) {
	if c.flushAll || c.closed {
		return // every key is being invalidated already, or nobody listens
	}
	if len(c.pending) >= maxPendingKeys {
		c.pending, c.flushAll, c.busyFrom = nil, true, 0
	} else {
		c.pending = append(c.pending, key)
	}
	if !c.busy {
		c.signal()
	}
}

// track registers key as read by the connection.
func (c *tracking) track(key []byte) {
	t := c.t
	st := t.stripe(key)
	st.mu.Lock()
	c.mu.Lock()
	_, dup := c.keys[string(key)]
	if c.closed || dup {
		c.mu.Unlock()
		st.mu.Unlock()
		return
	}
	w := st.keys[string(key)]
	if w == nil {
		w = &watched{key: string(key)}
		st.keys[w.key] = w
	}
	w.conns = append(w.conns, c)
	c.keys[w.key] = struct{}{}
	c.mu.Unlock()
	st.mu.Unlock()
	if t.pairs.Add(1) > t.maxKeys {
		t.evictOne()
	}
}

// begin marks the connection busy for the pipeline about to run: its
// invalidations wait until end.
func (c *tracking) begin() {
	c.mu.Lock()
	c.busy = true
	c.busyFrom = len(c.pending)
	c.mu.Unlock()
}

// end clears busy once the pipeline's replies are written, and lets the
// writer send what arrived meanwhile. With NOLOOP, the invalidations that
// arrived during the pipeline for keys it changed itself are dropped: the
// change is the connection's own (its keys are forgotten all the same).
func (c *tracking) end(own func(key string) bool) {
	c.mu.Lock()
	if c.noloop && own != nil && c.busyFrom < len(c.pending) {
		kept := c.pending[:c.busyFrom]
		for _, k := range c.pending[c.busyFrom:] {
			if !own(k) {
				kept = append(kept, k)
			}
		}
		clear(c.pending[len(kept):])
		c.pending = kept
	}
	c.busy = false
	if len(c.pending) > 0 || c.flushAll {
		c.signal()
	}
	c.mu.Unlock()
}

// writer writes the connection's invalidations as they come, each batch in
// one Write, until tracking stops. A write error ends it: the connection is
// going away.
func (c *tracking) writer() {
	var buf []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		if c.busy || c.closed {
			c.mu.Unlock()
			continue // end signals again
		}
		buf = appendInvalidations(buf[:0], c.pending, c.flushAll)
		clear(c.pending)
		c.pending, c.flushAll = c.pending[:0], false
		c.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := c.w.Write(buf); err != nil {
			return
		}
		if cap(buf) > 64<<10 {
			buf = nil
		}
	}
}

// invalidateHead starts every invalidation push.
const invalidateHead = ">2\r\n$10\r\ninvalidate\r\n"

// appendInvalidations renders the pushes for keys, one key per push as Redis
// sends them, or the single push for every key (a null key list).
func appendInvalidations(b []byte, keys []string, all bool) []byte {
	if all {
		return append(b, invalidateHead+"_\r\n"...)
	}
	for _, k := range keys {
		b = append(b, invalidateHead+"*1\r\n$"...)
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, "\r\n"...)
		b = append(b, k...)
		b = append(b, "\r\n"...)
	}
	return b
}

// trackedRead returns the keys among args that tracking registers: those
// of a read-only command, by its key positions in the table (RL.PEEK,
// EXISTS, TYPE, PTTL, TTL; DBSIZE, KEYS and SCAN name no key).
func trackedRead(cmd *command, args [][]byte) [][]byte {
	if !cmd.flags.has(flagReadonly) {
		return nil
	}
	return cmd.keys(args)
}

// clientTracking implements CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST]
// [PREFIX p ...] [OPTIN] [OPTOUT] [NOLOOP], with Redis's error texts.
// REDIRECT and BCAST are refused: invalidations go to the tracking
// connection itself, over RESP3.
func runClientTracking(s *Server, c *client, args [][]byte, p *pending) {
	var on bool
	switch {
	case bytes.EqualFold(args[1], []byte("on")):
		on = true
	case bytes.EqualFold(args[1], []byte("off")):
	default:
		c.local.Error(msgSyntax.Text())
		return
	}
	var optin, optout, noloop, bcast, prefix, redirect bool
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case bytes.EqualFold(a, []byte("redirect")) && i+1 < len(args):
			redirect = true
			i++
		case bytes.EqualFold(a, []byte("prefix")) && i+1 < len(args):
			prefix = true
			i++
		case bytes.EqualFold(a, []byte("bcast")):
			bcast = true
		case bytes.EqualFold(a, []byte("optin")):
			optin = true
		case bytes.EqualFold(a, []byte("optout")):
			optout = true
		case bytes.EqualFold(a, []byte("noloop")):
			noloop = true
		default:
			c.local.Error(msgSyntax.Text())
			return
		}
	}
	if !on {
		c.stopTracking()
		c.local.OK()
		return
	}
	tr := c.tracking
	switch {
	case optin && optout:
		c.local.Error(msgTrackingBoth.Text())
	case tr != nil && (optin && tr.optout || optout && tr.optin):
		c.local.Error(msgTrackingSwitch.Text())
	case prefix && !bcast:
		c.local.Error(msgTrackingPrefix.Text())
	case redirect:
		c.local.Error(msgTrackingRedirect.Text())
	case bcast:
		c.local.Error(msgTrackingBcast.Text())
	case c.proto != 3:
		c.local.Error(msgTrackingResp3.Text())
	case s.cfg.Tracker == nil:
		c.local.Error(msgTrackingDisabled.Text())
	default:
		if tr == nil {
			tr = s.cfg.Tracker.start(c.nc)
			c.tracking = tr
		}
		tr.optin, tr.optout, tr.noloop, tr.caching = optin, optout, noloop, 0
		c.local.OK()
	}
}

// runClientCaching implements CLIENT CACHING YES|NO, with Redis's error
// texts: it decides whether the next command's reads are tracked.
func runClientCaching(s *Server, c *client, args [][]byte, p *pending) {
	tr := c.tracking
	if tr == nil {
		c.local.Error(msgCachingMode.Text())
		return
	}
	switch {
	case bytes.EqualFold(args[1], []byte("yes")):
		if !tr.optin {
			c.local.Error(msgCachingYes.Text())
			return
		}
		tr.caching = 1
	case bytes.EqualFold(args[1], []byte("no")):
		if !tr.optout {
			c.local.Error(msgCachingNo.Text())
			return
		}
		tr.caching = -1
	default:
		c.local.Error(msgSyntax.Text())
		return
	}
	c.cachingSet = true
	c.local.OK()
}

// afterCommand registers the keys of a tracked read just dispatched, and
// ends the effect of CLIENT CACHING with the command that follows it.
func (c *client) afterCommand(p *pending, args [][]byte) {
	if c.cachingSet {
		c.cachingSet = false // CLIENT CACHING itself: it applies to the next command
		return
	}
	if p.deferred && p.cmd != nil {
		c.trackRead(p.cmd, args)
	}
	if c.multi == nil && !c.execing {
		// In a transaction, CLIENT CACHING holds until EXEC or DISCARD.
		c.tracking.caching = 0
	}
}

// stopTracking turns the connection's tracking off (TRACKING OFF, RESET, a
// switch to RESP2, the connection's end).
func (c *client) stopTracking() {
	if c.tracking != nil {
		c.tracking.stop()
		c.tracking = nil
	}
}

// trackRead registers the keys of a tracked read, as the connection's
// tracking mode and CLIENT CACHING say.
func (c *client) trackRead(cmd *command, args [][]byte) {
	tr := c.tracking
	keys := trackedRead(cmd, args)
	if keys == nil {
		return
	}
	switch {
	case tr.optin && tr.caching != 1:
		return
	case tr.optout && tr.caching == -1:
		return
	}
	for _, k := range keys {
		tr.track(k)
	}
}
