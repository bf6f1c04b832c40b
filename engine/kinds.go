package engine

// The table of kinds: one row per Kind says what the engine does
// differently for it, but for the decisions of the kinds whose state is
// three words, which are decide.go's switches (its comment says why).
// Adding a kind is adding its row (docs/design.md, "A new kind");
// TestKindTable fails for a kind below NumKinds without a complete row.

// NumKinds is one more than the highest Kind: the kinds are KindNone (0)
// and 1..NumKinds-1. persistence derives the highest kind a snapshot may
// hold from it.
const NumKinds = KindList + 1

// stateShape says where a key's state lives besides its entry, and so the
// shape of its snapshot record (Record).
type stateShape uint8

const (
	// inWords: the entry's three words (Record.A, B, C), decided by
	// decide.go's switches.
	inWords stateShape = iota + 1
	// inLog: a ring of timestamps (Record.Log; log.go).
	inLog
	// inLeases: a set of leases (Record.Leases; concurrency.go).
	inLeases
	// inValue: a string value (Record.Value, Record.A its expiry in ms;
	// strings.go).
	inValue
	// inColl: a collection (a hash, sorted set or list; Record.Elems,
	// Record.A its expiry in ms; colls.go).
	inColl
	numShapes
)

// kindInfo is one kind's row.
type kindInfo struct {
	// name is Kind.String's: TYPE's reply, SCAN ... TYPE's argument,
	// ParseKind's input, RL.ALL's algorithm (case-insensitive).
	name string
	// checkRule validates a rule of the kind and a cost against the
	// engine's bounds (maxLog is Config.MaxLogLimit); rules.go.
	checkRule func(r Rule, cost, maxLog int64) error
	// shape is where the state lives, and the snapshot record's shape.
	// An inWords kind is decided by decide.go's switches (normalize,
	// initial, fresh, change, eval, ttl), each of which must name it
	// (TestDecisionSwitches); the other shapes have their own paths.
	shape stateShape
	// checkState validates a snapshot record's state words against its
	// (valid) rule: anything the engine could not have produced is an
	// error (export.go). Set exactly when shape is inWords.
	checkState func(rec *Record) error
	// keyBytes is what a new key of the kind holds besides its entry, its
	// key and its rule, for the memory accounting (memory.go).
	keyBytes int64
	// layerable: RL.ALL and the rate limit service may decide it (all.go,
	// ratelimit.go, resp's RL.ALL).
	layerable bool
}

// kinds is the table, indexed by Kind. It is never written.
var kinds = [NumKinds]kindInfo{
	KindNone: {name: "none", checkRule: refuseRule},
	KindToken: {
		name: "token", checkRule: checkCountRule, shape: inWords, layerable: true,
		checkState: checkBucketState,
	},
	KindLeaky: {
		name: "leaky", checkRule: checkCountRule, shape: inWords, layerable: true,
		checkState: checkBucketState,
	},
	KindFixed: {
		name: "fixed", checkRule: checkCountRule, shape: inWords, layerable: true,
		checkState: checkFixedState,
	},
	KindSliding: {
		name: "sliding", checkRule: checkCountRule, shape: inWords, layerable: true,
		checkState: checkSlidingState,
	},
	KindLog: {
		name: "log", checkRule: checkLogRule, shape: inLog, layerable: true,
		keyBytes: ringCost + tsCost,
	},
	KindGCRA: {
		name: "gcra", checkRule: checkGCRARule, shape: inWords,
		checkState: checkGCRAState,
	},
	KindConcurrency: {
		name: "concurrency", checkRule: checkConcurrencyRule, shape: inLeases,
		keyBytes: leaseSetCost + leaseCost,
	},
	// A string is not a limiter: no rule is valid for it (strings.go
	// makes its keys), and it cannot be layered.
	KindString: {
		name: "string", checkRule: refuseRule, shape: inValue,
		keyBytes: strCost, // the value's bytes come as roomExtra's bytes
	},
	// Collections are not limiters either (colls.go); their elements'
	// bytes come as roomExtra's bytes.
	KindHash: {name: "hash", checkRule: refuseRule, shape: inColl, keyBytes: collCost},
	KindZSet: {name: "zset", checkRule: refuseRule, shape: inColl, keyBytes: collCost},
	KindList: {name: "list", checkRule: refuseRule, shape: inColl, keyBytes: collCost},
}

// kindOf is k's row; a Kind beyond the table reads as KindNone's.
func kindOf(k Kind) *kindInfo {
	if k >= NumKinds {
		k = KindNone
	}
	return &kinds[k]
}

// Layerable reports whether RL.ALL (and the rate limit service) may decide
// a limit of kind k.
func (k Kind) Layerable() bool { return kindOf(k).layerable }
