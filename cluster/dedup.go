package cluster

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
)

// At-most-once forwarding.
//
// A follower whose connection to the leader breaks after it wrote a batch
// cannot know whether the batch reached the log. It sends it again, on a new
// connection (to a new leader, perhaps), with the same batch ID, while its
// deadline allows. Every replica's FSM remembers the IDs of the forwarded
// batches it applied, with the log time (the entry's leader stamp) at which
// they applied, and skips a batch whose ID it has seen: its caller gets
// the first copy's results from the reply cache (below), or UNCERTAIN
// (errDuplicateBatch) when this replica has none. Whatever copy applies first is the one that counts; the set is part
// of the replicated state (it changes only as entries apply, and travels
// in snapshots), so a new leader skips the same copies the old one would.
//
// The set is bounded in log time and in count, so its memory is bounded:
// an ID is forgotten once the log time is dedupWindow past it, or once
// dedupMax newer IDs were recorded. A follower re-sends for at most
// forward.ResendWindow after its first write (and never past its command's
// deadline), well within dedupWindow even with leaders' clocks seconds
// apart. The count bound shortens the window only above dedupMax /
// dedupWindow = ~2,000 forwarded batches per second sustained for a whole
// minute; a re-send arrives within forward.ResendWindow (10 s), so at-most-once
// holds up to ~13,000 forwarded batches (pipelines) per second, above what
// one leader commits here. Past that, a re-send that arrives after its ID
// was evicted would apply twice; the count bound is what keeps memory
// (~5 MB) and snapshots (~3 MB) small.
const (
	dedupWindow = time.Minute
	dedupMax    = 1 << 17
	// dedupMetaPfx names the snapshot meta pairs holding the set: each
	// value is up to dedupPerMeta records of 16 bytes of ID and 8 of
	// stamp (big-endian), oldest first.
	dedupMetaPfx = "fwd.dedup."
	// dedupMetaNow holds the set's log time (the latest stamp admitted),
	// which expiry depends on: every replica must agree on it.
	dedupMetaNow = "fwd.dedup-now"
	dedupRecLen  = 24
	dedupPerMeta = (64 << 10) / dedupRecLen
)

// dedupRec is one remembered batch.
type dedupRec struct {
	id    codec.BatchID
	stamp int64
}

// dedupSet is the FSM's set of applied forwarded batch IDs. It is owned by
// the FSM goroutine (Apply, Snapshot, Restore): no lock.
type dedupSet struct {
	seen  map[codec.BatchID]struct{}
	order []dedupRec // a FIFO: order[head:] are live, oldest first
	head  int
	now   int64 // the latest stamp seen: log time never goes back here
}

func newDedupSet() *dedupSet { return &dedupSet{seen: make(map[codec.BatchID]struct{})} }

// len is the number of IDs remembered.
func (s *dedupSet) len() int { return len(s.order) - s.head }

// admit records id as applied at stamp and reports true, or reports false
// when id was applied already (the batch must be skipped).
func (s *dedupSet) admit(id codec.BatchID, stamp int64) bool {
	s.now = max(s.now, stamp)
	s.expire()
	if _, dup := s.seen[id]; dup {
		return false
	}
	s.seen[id] = struct{}{}
	s.order = append(s.order, dedupRec{id: id, stamp: s.now})
	if s.len() > dedupMax {
		s.pop()
	}
	return true
}

// expire forgets the IDs older than dedupWindow in log time.
func (s *dedupSet) expire() {
	for s.len() > 0 && s.order[s.head].stamp < s.now-int64(dedupWindow) {
		s.pop()
	}
}

func (s *dedupSet) pop() {
	delete(s.seen, s.order[s.head].id)
	s.order[s.head] = dedupRec{}
	s.head++
	s.order, s.head = compactFront(s.order, s.head)
}

// compactFront moves a queue's live part (from head) to the front of its
// slice once the dead front is half the slice, and returns the queue and
// its new head: amortized O(1).
func compactFront[T any](q []T, head int) ([]T, int) {
	if head <= 1024 || head*2 <= len(q) {
		return q, head
	}
	n := copy(q, q[head:])
	clear(q[n:])
	return q[:n], 0
}

// meta encodes the set as snapshot meta pairs.
func (s *dedupSet) meta() [][2]string {
	live := s.order[s.head:]
	out := [][2]string{{dedupMetaNow, strconv.FormatInt(s.now, 10)}}
	for i := 0; i < len(live); i += dedupPerMeta {
		chunk := live[i:min(i+dedupPerMeta, len(live))]
		b := make([]byte, 0, len(chunk)*dedupRecLen)
		for _, r := range chunk {
			b = append(b, r.id[:]...)
			b = binary.BigEndian.AppendUint64(b, uint64(r.stamp))
		}
		out = append(out, [2]string{dedupMetaPfx + strconv.Itoa(i/dedupPerMeta), string(b)})
	}
	return out
}

// restoreDedup rebuilds a set from a snapshot's meta pairs (which keep the
// order they were written in). Pairs not of the set are ignored.
func restoreDedup(meta [][2]string) (*dedupSet, error) {
	s := newDedupSet()
	for _, kv := range meta {
		if kv[0] == dedupMetaNow {
			now, err := strconv.ParseInt(kv[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", kv[0], err)
			}
			s.now = max(s.now, now)
			continue
		}
		if !strings.HasPrefix(kv[0], dedupMetaPfx) {
			continue
		}
		v := kv[1]
		if len(v)%dedupRecLen != 0 {
			return nil, fmt.Errorf("%s: %d bytes is not a whole number of records", kv[0], len(v))
		}
		for ; len(v) > 0; v = v[dedupRecLen:] {
			var r dedupRec
			copy(r.id[:], v)
			r.stamp = int64(binary.BigEndian.Uint64([]byte(v[16:dedupRecLen])))
			if _, dup := s.seen[r.id]; dup {
				continue
			}
			s.seen[r.id] = struct{}{}
			s.order = append(s.order, r)
			s.now = max(s.now, r.stamp)
		}
	}
	for s.len() > dedupMax {
		s.pop()
	}
	return s, nil
}

// The reply cache. The set above makes a re-sent batch apply at most once;
// the cache gives its sender the first copy's results. Every replica keeps
// the results of the forwarded batches it applied lately, by batch ID,
// encoded as the forwarding wire carries them (codec.AppendResults: bytes
// the garbage collector need not scan, about 10 to 20 per result), filled
// as entries apply, like the set; so whichever node leads when the re-send
// arrives answers it with what the first copy decided: the same leader, or
// a new one that applied the first copy as a follower. A replica that
// never applied the first copy itself (it restored a snapshot past it) has
// no reply, and the re-send is answered UNCERTAIN (errDuplicateBatch): the
// only outcome no node can tell.
//
// The cache is memory only, never in a snapshot, and bounded: a reply is
// dropped replyWindow of log time after its batch applied (a follower
// re-sends for at most forward.ResendWindow after its first write), or sooner
// once the replies kept take more than replyMaxBytes or outnumber
// dedupMax (so at most about replyMaxBytes per group and replica, whatever
// the load; under a load that fills it faster, the window shrinks and a
// late re-send is answered UNCERTAIN as before).
const (
	replyWindow   = 15 * time.Second
	replyMaxBytes = 32 << 20
	// replyOverhead is what a kept reply costs besides its bytes: its map
	// entry and its place in the FIFO.
	replyOverhead = 96
)

// replyRec is one kept reply, in the cache's FIFO.
type replyRec struct {
	id    codec.BatchID
	stamp int64
	size  int64
}

// replyCache is a replica's recent replies. It is owned by the FSM
// goroutine; bytes and batches are read by the metrics.
type replyCache struct {
	m       map[codec.BatchID][]byte // the encoded results
	order   []replyRec               // a FIFO: order[head:] are live, oldest first
	head    int
	scratch []byte // keep's encoding buffer
	bytes   atomic.Int64
	batches atomic.Int64
}

func newReplyCache() *replyCache {
	return &replyCache{m: make(map[codec.BatchID][]byte)}
}

// keep stores b, which the cache owns from now on, as the encoded reply of
// batch id applied at log time stamp, and drops what is past the bounds.
func (c *replyCache) keep(id codec.BatchID, stamp int64, b []byte) {
	if _, ok := c.m[id]; ok {
		return
	}
	size := int64(len(b)) + replyOverhead
	c.m[id] = b
	c.order = append(c.order, replyRec{id: id, stamp: stamp, size: size})
	c.bytes.Add(size)
	c.batches.Add(1)
	c.expire(stamp)
}

// get decodes the reply kept for batch id, whose ops are ops, into rs,
// which must have as many results as the batch had ops; false when none is
// kept (or it does not fit rs).
func (c *replyCache) get(id codec.BatchID, ops []engine.Op, rs []engine.Result) bool {
	b, ok := c.m[id]
	return ok && codec.DecodeResults(b, ops, rs, sentinels) == nil
}

// expire drops the replies older than replyWindow at log time now, and
// the oldest while the cache holds more than replyMaxBytes or more
// batches than the set remembers (a re-send of a batch the set forgot
// applies again: its reply is of no use).
func (c *replyCache) expire(now int64) {
	for c.head < len(c.order) {
		r := c.order[c.head]
		if r.stamp >= now-int64(replyWindow) && c.bytes.Load() <= replyMaxBytes && c.batches.Load() <= dedupMax {
			break
		}
		delete(c.m, r.id)
		c.bytes.Add(-r.size)
		c.batches.Add(-1)
		c.order[c.head] = replyRec{}
		c.head++
	}
	c.order, c.head = compactFront(c.order, c.head)
}
