package engine

// This file fixes the Engine's method set that resp/, cluster/ and
// persistence/ code against. Bodies live in the files named beside each.

// Config sizes an Engine.
type Config struct {
	// Shards is the number of lock stripes, rounded up to a power of two
	// (default 256).
	Shards int
	// MaxLogLimit bounds RL.LOG's limit, and so the timestamps one key may
	// hold (default 100000).
	MaxLogLimit int64
	// MaxKeys, when positive, bounds the keys with live state: a decision
	// that would create one more fails with ErrKeyLimit. (A key back at
	// its initial state stops counting at the next whole second of the
	// clock, and Sweep and ExportShard keep it until then: memory.go.)
	MaxKeys int64
	// MaxBytes, when positive, bounds the engine's accounted memory
	// (MemoryBytes): a decision that would create a key beyond it fails
	// with ErrOOM. Existing keys keep working under both limits.
	MaxBytes int64
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
}

// Lease is one RL.ACQUIRE lease: its token, units and expiry (nanoseconds
// since the epoch; the lease is gone at that time).
type Lease struct {
	Token  []byte
	Units  int64
	Expiry int64
}
