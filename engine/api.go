// Package engine is sluice's in-memory limiter engine: it decides, atomically
// and exactly, whether a request may pass.
//
// Keys are hashed with xxhash into a power-of-two number of lock-striped
// stripes. Every operation is given the time (int64 nanoseconds since the Unix
// epoch) at which it happens: the engine never reads a clock, so replicas that
// apply the same operations at the same times compute bit-identical state.
// The engine imports nothing of sluice's but the error codes
// (internal/errcode): no protocol, no Raft, no disk.
package engine

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Kind names a limiter algorithm. The zero Kind means "no state".
type Kind uint8

// The limiter kinds, in the order docs/commands.md lists the limiter
// commands. Their numeric values are part of the snapshot format and of the
// replicated log: never renumber them. Each has its row in the table of
// kinds (kinds.go), which says what the engine does with it.
const (
	KindNone    Kind = 0
	KindToken   Kind = 1 // RL.TOKEN: token bucket
	KindLeaky   Kind = 2 // RL.LEAKY: leaky bucket as a meter
	KindFixed   Kind = 3 // RL.FIXED: fixed window counter
	KindSliding Kind = 4 // RL.SLIDING: sliding window counter
	KindLog     Kind = 5 // RL.LOG: sliding window log
	KindGCRA    Kind = 6 // CL.THROTTLE: redis-cell's GCRA
	// KindConcurrency: RL.ACQUIRE/RL.RELEASE leases. Its Rule.Limit is the
	// most units held at once; Rule.Period is the lease's ttl in
	// nanoseconds (each lease keeps its own expiry: concurrency.go).
	KindConcurrency Kind = 7
	// KindString: a Redis string key (GET, SET, INCRBY, EXPIRE...), not
	// a limiter: its Rule has no parameters (strings.go).
	KindString Kind = 8
)

// String returns the name TYPE replies for the kind, its row's in the
// table of kinds (kinds.go); "none" for KindNone and a Kind beyond it.
func (k Kind) String() string { return kindOf(k).name }

// ParseKind is the inverse of Kind.String for every kind but KindNone.
func ParseKind(name string) (Kind, bool) {
	for k := KindNone + 1; k < NumKinds; k++ {
		if kinds[k].name == name {
			return k, true
		}
	}
	return KindNone, false
}

// Rule is a limiter's parameters, as given on every call.
//
//   - Token, Leaky: Limit is the capacity, Period the emission interval in
//     nanoseconds (one unit per Period).
//   - Fixed, Sliding, Log: Limit is the limit, Period the window in nanoseconds.
//   - GCRA: Limit is max_burst+1, Period the emission interval T in
//     nanoseconds (period*1e9/count, truncated).
type Rule struct {
	Kind   Kind
	Limit  int64
	Period int64
}

// OpCode says what an Op does. What the rest of sluice must know about an
// operation (whether it mutates, how it is routed and its results merge,
// which fields name its keys) is its row in the table of operations
// (ops.go), read through OpCode's methods.
type OpCode uint8

// Operation codes. Their numeric values are part of the replicated log: never
// renumber them. Each has its row in the table of operations (ops.go).
const (
	// OpDecide runs the rule's algorithm on Key with Cost (Cost 0 peeks).
	OpDecide OpCode = 1
	// OpPeek replies what the key's own command would with its stored rule
	// and cost 0 (RL.PEEK); Result.Kind is KindNone when the key has no state.
	OpPeek OpCode = 2
	// OpDelete forgets Key; Result.Count is 1 if it had state, else 0.
	OpDelete OpCode = 3
	// OpExists sets Result.Count to 1 if Key has state, else 0.
	OpExists OpCode = 4
	// OpType sets Result.Kind to the key's kind (KindNone when absent).
	OpType OpCode = 5
	// OpTTL sets Result.TTL to the nanoseconds until the key's state is
	// back at its initial state (-2 when absent, as PTTL). For a string key
	// with an expiry, Result.Kind is KindString and the TTL is in
	// milliseconds (expiry - now, as Redis's PTTL); -1 without one.
	OpTTL OpCode = 6
	// OpCount sets Result.Count to the number of keys with state (DBSIZE).
	OpCount OpCode = 7
	// OpScan runs one SCAN step from Cursor, matching Pattern (a Redis glob,
	// empty matches all) and, unless Rule.Kind is KindNone, only that kind,
	// examining about Count keys. Result.Keys and Result.Cursor are set.
	OpScan OpCode = 8
	// OpKeys sets Result.Keys to every key matching Pattern (KEYS).
	OpKeys OpCode = 9
	// OpFlush forgets every key (FLUSHALL); Result.Count is how many existed.
	OpFlush OpCode = 10
	// OpTimeWarp advances the clock by Clock nanoseconds (DEBUG TIMEWARP).
	OpTimeWarp OpCode = 11
	// OpClockFreeze freezes the clock at Clock nanoseconds since the epoch,
	// or at the current time when Clock is 0 (DEBUG CLOCK FREEZE).
	OpClockFreeze OpCode = 12
	// OpClockResume lets a frozen clock run again (DEBUG CLOCK RESUME).
	OpClockResume OpCode = 13
	// OpTime sets Result.Time to the clock's time in nanoseconds (TIME).
	OpTime OpCode = 14
	// OpAll decides every limit of All at one instant, all charged or none
	// (RL.ALL): Result holds the combined reply and Result.Each one result
	// per limit, in order. Rule, Cost and Key are unused.
	OpAll OpCode = 15
	// OpAcquire takes or renews the lease Token of Cost units on the
	// KindConcurrency key Key (RL.ACQUIRE); Rule.Period is the ttl. Cost 0
	// peeks.
	OpAcquire OpCode = 16
	// OpRelease ends the lease Token on Key (RL.RELEASE); Result.Count is
	// 1 if a live lease was released, else 0.
	OpRelease OpCode = 17
)

// Operation codes of Envoy's rate limit service (SPEC section 12; the
// numbers 40..47 are reserved for it). Every code in this block needs the
// cluster version that introduced it before a leader may log it.
const (
	// OpRateLimit decides one request of Envoy's rate limit service at one
	// instant (ratelimit.go): All holds one limit per descriptor that has a
	// rule, in request order; a key may repeat (each occurrence is charged)
	// and a limit of 0 always denies a positive cost without touching a
	// key. Shadow is the shadow mask: bit i set makes All[i] a shadow
	// limit, which never denies the request and, without room, is left
	// uncharged. The request is allowed unless an enforced limit denies;
	// then nothing changes. Result.Allowed is that outcome, Result.Time
	// the decision time in nanoseconds, Result.Each one result per limit
	// (Allowed: that limit had room). Rule, Cost and Key are unused.
	OpRateLimit OpCode = 40
)

// Op is one engine operation. Key, Pattern, Token and All are not retained
// by the engine after the call returns, except that a new key's or lease's
// bytes are copied.
//
// Every field means one thing, whatever the op; an op uses the fields its
// row in the table of operations names (ops.go), and cluster refuses one
// carrying another. Cost, Delta, Count and Clock share one field of the
// wire (cluster/codec chooses by the row), as do Cursor and Shadow.
type Op struct {
	Code OpCode
	Rule Rule
	// Cost is what a decision charges (OpDecide, OpAcquire). It is
	// signed: a negative Cost on the RL.* kinds (not GCRA, not
	// concurrency) is a refund of up to -Cost units.
	Cost int64
	// Delta is an increment (OpIncrBy's).
	Delta int64
	// Count is OpScan's COUNT: about how many keys the step examines.
	Count int64
	// Clock is the clock ops' argument, in nanoseconds: OpTimeWarp's jump,
	// OpClockFreeze's instant since the epoch (0: the current time).
	Clock int64
	// Cursor is OpScan's cursor.
	Cursor uint64
	// Shadow is OpRateLimit's shadow mask: bit i set makes All[i] a
	// shadow limit.
	Shadow  uint64
	Key     []byte
	Pattern []byte
	Token   []byte  // OpAcquire, OpRelease: the lease's token (1..MaxToken bytes)
	All     []Limit // OpAll, OpRateLimit: the limits, 1..MaxAll of them
	// Each is optional room for OpAll's per-limit results: when its
	// capacity holds len(All) results, Result.Each is built in it (and so
	// aliases it) instead of being allocated. It is not replicated.
	Each []Result
	// The string ops' fields (strings.go): Value is OpSet's value, Expire
	// an expiry in ms (relative or absolute as Flags say), Flags the
	// Str* flags.
	Value  []byte
	Expire int64
	Flags  uint32
	// Args is the argument list of the ops that take a variable number of
	// arguments (a script's keys and arguments, a hash's fields and values,
	// a sorted set's scores and members, a list's elements): its meaning is
	// the op's, written in the op's doc comment. Like Key, it is not
	// retained after the call; what a new element keeps is copied.
	Args [][]byte
	// DB is the database (0..NumDBs-1) the op's keys belong to: a key is
	// one key per database (SELECT). Ops over the whole keyspace (SCAN,
	// KEYS, DBSIZE, FLUSHDB) act on DB alone.
	DB uint8
}

// Limit is one limit of an OpAll: a key, its rule (one of the five RL.*
// kinds) and a signed cost, as OpDecide takes them.
type Limit struct {
	Key  []byte
	Rule Rule
	Cost int64
}

const (
	// MaxAll is the most limits one OpAll may hold.
	MaxAll = 64
	// MaxToken is the longest lease token, in bytes.
	MaxToken = 128
)

// Result is the outcome of one Op.
//
// For OpDecide and OpPeek, the five fields of the decision reply
// (docs/commands.md, "The decision reply") are set: for the RL.* kinds
// RetryAfter and ResetAfter are milliseconds (RetryAfter is 0 when allowed
// and -1 when the cost can never be allowed); for KindGCRA they are
// redis-cell's whole seconds (RetryAfter -1 when allowed).
//
// Count, TTL and Time are the op's number, each with one meaning; an op
// answers in the one its row names (ops.go, Answer), and they share one
// field of the wire (cluster/codec).
type Result struct {
	Err        error // nil, or one of the errors below
	Kind       Kind
	Allowed    bool
	Limit      int64
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
	// Count is a count: of keys (DELETE, EXISTS, DBSIZE...), or a string
	// op's outcome (1 stored, the new value of INCRBY, a length).
	Count int64
	// TTL is OpTTL's time to live: nanoseconds until the key is back at
	// its initial state; for a string key (Kind KindString) milliseconds
	// until its expiry, as Redis's PTTL counts (an expiry may lie beyond
	// what nanoseconds hold); -1 for a string without expiry, -2 absent.
	TTL int64
	// Time is an instant: OpTime's clock and OpRateLimit's decision time
	// in nanoseconds since the epoch; OpExpireTime's expiry in
	// milliseconds since the epoch (-1 without one, -2 absent).
	Time   int64
	Cursor uint64
	Keys   [][]byte
	// Each is OpAll's per-limit results, in the order of Op.All (nil for
	// every other op, so a single decision allocates nothing).
	Each []Result
	// Value is a string key's value (OpGet, OpGetDel, OpGetEx, OpSet with
	// StrGet), set when Kind is KindString; the result owns it.
	Value []byte
	// Values is a list reply of the collection ops (HMGET, HGETALL,
	// ZRANGE, LRANGE...): its meaning is the op's; a nil element is a nil
	// reply (HMGET of a missing field), distinct from an empty value. The
	// result owns it.
	Values [][]byte
}

// Errors an operation can report in Result.Err. Each is an
// *errcode.Error: the error returned carries the same code (errors.Is
// matches it) with its details (a key, the max-keys limit...); the RESP
// server maps the code to the Redis reply text.
var (
	// ErrWrongType: the key holds another kind of limiter.
	ErrWrongType error = errcode.New(errcode.WrongType)
	// ErrClockBackwards: DEBUG CLOCK FREEZE at an instant before the clock's time.
	ErrClockBackwards error = errcode.New(errcode.ClockBackwards)
	// ErrBadRule: a rule the engine cannot hold (the server validates
	// arguments first; this guards the replicated path).
	ErrBadRule error = errcode.New(errcode.BadRule)
	// ErrOOM: the call would create a key beyond Config.MaxBytes (Redis's
	// maxmemory error). Calls on existing keys are never refused.
	ErrOOM error = errcode.New(errcode.OOM)
	// ErrKeyLimit: the call would create a key beyond Config.MaxKeys. The
	// error returned names the limit.
	ErrKeyLimit error = errcode.New(errcode.KeyLimit)
	// ErrDuplicateKey: an OpAll names a key twice. The error returned
	// names the key; the server checks this first with its own text.
	ErrDuplicateKey error = errcode.New(errcode.DuplicateKey)
)

// badRule returns ErrBadRule's code with a detail.
func badRule(format string, args ...any) error {
	return &errcode.Error{Code: errcode.BadRule, Detail: fmt.Sprintf(format, args...)}
}
