package engine

// This file holds the types that resp/, cluster/ and persistence/ use beside
// the Engine itself: its Config, the Watcher it tells of changes, and the
// state a snapshot carries (ClockState, Record, Lease). The Engine and its
// methods live in engine.go (New, Apply, Decide, the locking) and beside it
// in all.go, concurrency.go, digest.go, export.go, memory.go, rules.go and
// scan.go; what differs by kind is the table of kinds.go.

// Config sizes an Engine.
type Config struct {
	// Stripes is the number of lock stripes, rounded up to a power of two
	// (default 256).
	Stripes int
	// MaxLogLimit bounds RL.LOG's limit, and so the timestamps one key may
	// hold (default 100000).
	MaxLogLimit int64
	// MaxKeys, when positive, bounds the keys with live state: a decision
	// that would create one more fails with ErrKeyLimit. (A key back at
	// its initial state stops counting at the next whole second of the
	// clock, and Sweep and ExportStripe keep it until then: memory.go.)
	MaxKeys int64
	// MaxBytes, when positive, bounds the engine's accounted memory
	// (MemoryBytes): a decision that would create a key beyond it fails
	// with ErrOOM. Existing keys keep working under both limits.
	MaxBytes int64
	// MaxValueLen bounds a string key's value in bytes (default
	// DefaultMaxValueLen): a longer one fails with errcode.ValueTooLong.
	MaxValueLen int
	// MaxCollectionLen bounds a hash's, sorted set's or list's elements
	// (default DefaultMaxCollectionLen): an op that would grow one past
	// it fails with errcode.CollectionTooLarge.
	MaxCollectionLen int
	// Watcher, when set, is told of every key whose state may have
	// changed (client-side caching's invalidations). Nil by default: the
	// engine then pays one predictable branch per change.
	Watcher Watcher
	// Scripts runs OpEval and OpEvalSha (scripts.go); without it they
	// fail with errcode.NoScripting.
	Scripts ScriptRunner
	// ScriptCacheMax and ScriptCacheBytes bound the loaded scripts
	// (defaults DefaultScriptCacheMax, DefaultScriptCacheBytes): a new
	// script beyond them fails with errcode.ScriptCacheFull.
	ScriptCacheMax   int64
	ScriptCacheBytes int64
}

// Watcher is told which keys' state may have changed: by a decision with a
// cost (a charge or a refund), a delete, a reclaim of a key back at its
// initial state (by an access, Sweep or the memory limits), or any other
// mutating operation with a key; AllChanged by FLUSHALL and Reset. It may be
// told of a key that did not in fact change, and of one key more than once.
//
// The engine calls it on the goroutine that runs the operation, sometimes
// with a stripe lock held, so it must be cheap and take at most a leaf lock:
// one never held while calling into the engine. It must not retain key.
type Watcher interface {
	KeyChanged(key []byte)
	AllChanged()
}

// ClockState is the replicated state of the decision clock (see clock.go).
type ClockState struct {
	Offset   int64 // added to wall time while running
	Frozen   bool  // when true, time is FrozenAt
	FrozenAt int64
	Last     int64 // the latest time handed out: time never goes backwards
}

// Record is one key's complete state, as exported for a snapshot and
// imported on restore. A, B and C are the algorithm's state words (see the
// state type of each kind); Log holds RL.LOG's timestamps, oldest first;
// Leases holds a concurrency key's leases in (Expiry, Token) order.
type Record struct {
	Key    []byte
	Rule   Rule
	A      int64
	B      int64
	C      int64
	Log    []int64
	Leases []Lease
	// Value is a KindString key's value (A is then its expiry, a Unix time
	// in ms, 0 for none).
	Value []byte
	// Elems is a collection's elements (A is then its expiry, as for a
	// string): a hash's fields and values alternating, in insertion
	// order; a sorted set's members in score order, with Scores their
	// scores; a list's elements from head to tail.
	Elems  [][]byte
	Scores []float64
	// DB is the key's database (0..NumDBs-1).
	DB uint8
}

// Lease is one RL.ACQUIRE lease: its token, units and expiry (nanoseconds
// since the epoch; the lease is gone at that time).
type Lease struct {
	Token  []byte
	Units  int64
	Expiry int64
}
