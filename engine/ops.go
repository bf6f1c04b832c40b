package engine

import "strconv"

// The table of operations: one row per OpCode saying what the rest of
// sluice must know about the operation without running it (docs/design.md,
// "A new operation"). Every property of an operation that code outside its
// own case of Engine.Apply tests lives here; a new OpCode gets a row and
// TestOpTableComplete fails until it has one.

// Route says which Raft groups of a node with several groups run an
// operation (cluster's Host).
type Route uint8

// The routes. The zero Route is unset: every row names one.
const (
	// RouteKey: the group owning the slot of the op's key (the field its
	// row's Keys names: Key, or All[0].Key; group 0 for an op without one).
	RouteKey Route = iota + 1
	// RouteEvery: every group; the results merge by the row's Merge.
	RouteEvery
	// RouteGroup0: group 0 only (an op that reads what every group has
	// alike, as the clock).
	RouteGroup0
	// RouteCursor: the group a SCAN cursor's top bits name.
	RouteCursor
)

// Merge says how the results of an operation that ran in several groups
// combine into one.
type Merge uint8

// The merges. The zero Merge is unset: every row names one.
const (
	// MergeOne: the op runs in one group; its result is that group's.
	MergeOne Merge = iota + 1
	// MergeSum: Result.Count adds up (DBSIZE, FLUSHALL's count).
	MergeSum
	// MergeConcat: Result.Keys concatenate, in group order (KEYS).
	MergeConcat
	// MergeFirst: group 0's result (the clock commands: every group's
	// clock moved alike).
	MergeFirst
)

// KeyFields says which fields of an Op name the keys it reads or changes.
type KeyFields uint8

// The key fields.
const (
	// KeysNone: the op names no key.
	KeysNone KeyFields = iota
	// KeysKey: Op.Key.
	KeysKey
	// KeysAll: Op.All[i].Key, every limit's.
	KeysAll
	// KeysEvery: no field; the op concerns every key (FLUSHALL).
	KeysEvery
)

// opInfo is one row of the table.
type opInfo struct {
	name string // the constant's name, as OpCode.String returns it
	// mutates: the op can change state, so it goes through the replicated
	// log, CLIENT TRACKING's NOLOOP sees it, and a failure in some groups
	// of an op run in several is UNCERTAIN.
	mutates bool
	route   Route
	merge   Merge
	// growsReply: the reply grows with the keyspace (KEYS, SCAN), so the
	// op ends its pipeline segment and MULTI refuses its command.
	growsReply bool
	keys       KeyFields
}

// numOps bounds the operation codes: every OpCode is below it. An untyped
// constant, so that it is no OpCode itself.
const numOps = int(OpMove) + 1

// ops is the table, indexed by OpCode; a code without an operation has a
// zero row (no name). Read-only.
var ops = [numOps]opInfo{
	OpDecide:      {name: "OpDecide", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpPeek:        {name: "OpPeek", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpDelete:      {name: "OpDelete", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpExists:      {name: "OpExists", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpType:        {name: "OpType", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpTTL:         {name: "OpTTL", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpCount:       {name: "OpCount", route: RouteEvery, merge: MergeSum},
	OpScan:        {name: "OpScan", route: RouteCursor, merge: MergeOne, growsReply: true},
	OpKeys:        {name: "OpKeys", route: RouteEvery, merge: MergeConcat, growsReply: true},
	OpFlush:       {name: "OpFlush", mutates: true, route: RouteEvery, merge: MergeSum, keys: KeysEvery},
	OpTimeWarp:    {name: "OpTimeWarp", mutates: true, route: RouteEvery, merge: MergeFirst},
	OpClockFreeze: {name: "OpClockFreeze", mutates: true, route: RouteEvery, merge: MergeFirst},
	OpClockResume: {name: "OpClockResume", mutates: true, route: RouteEvery, merge: MergeFirst},
	OpTime:        {name: "OpTime", route: RouteGroup0, merge: MergeOne},
	OpAll:         {name: "OpAll", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysAll},
	OpAcquire:     {name: "OpAcquire", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpRelease:     {name: "OpRelease", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},

	OpGet:         {name: "OpGet", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpSet:         {name: "OpSet", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpIncrBy:      {name: "OpIncrBy", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpGetDel:      {name: "OpGetDel", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpGetEx:       {name: "OpGetEx", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpExpire:      {name: "OpExpire", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpPersist:     {name: "OpPersist", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpStrlen:      {name: "OpStrlen", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpExpireTime:  {name: "OpExpireTime", route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpIncrByFloat: {name: "OpIncrByFloat", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},

	// WATCH (watch.go): through the log, so that every replica's table
	// is the same; routed by Key, which they read but never change (the
	// watcher is not told of them: Engine.notify).
	OpWatch:      {name: "OpWatch", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},
	OpWatchCheck: {name: "OpWatchCheck", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},

	// Databases (databases.go).
	OpFlushDB: {name: "OpFlushDB", mutates: true, route: RouteEvery, merge: MergeSum, keys: KeysEvery},
	OpSwapDB:  {name: "OpSwapDB", mutates: true, route: RouteEvery, merge: MergeFirst, keys: KeysEvery},
	OpMove:    {name: "OpMove", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey},

	// Every key of a rate limit request carries its domain as the hash
	// tag (rls), so they share one slot: All[0].Key routes it.
	OpRateLimit: {name: "OpRateLimit", mutates: true, route: RouteKey, merge: MergeOne, keys: KeysAll},
}

// unknownOp is the row of a code without an operation (an op from a newer
// build, refused by the engine and by the cluster's version gate): routed
// by Op.Key as any keyed op, a read.
var unknownOp = opInfo{route: RouteKey, merge: MergeOne, keys: KeysKey}

// info returns c's row.
func (c OpCode) info() *opInfo {
	if int(c) < numOps && ops[c].name != "" {
		return &ops[c]
	}
	return &unknownOp
}

// String returns the operation's constant name ("OpDecide"), or
// "OpCode(n)" for a code without an operation.
func (c OpCode) String() string {
	if n := c.info().name; n != "" {
		return n
	}
	return "OpCode(" + strconv.Itoa(int(c)) + ")"
}

// Mutates reports whether the operation can change state and so must go
// through the replicated log; the others are reads. It also decides that
// CLIENT TRACKING's NOLOOP sees the op, and that a failure in some groups
// of an op run in several is UNCERTAIN.
func (c OpCode) Mutates() bool { return c.info().mutates }

// Route returns which Raft groups run the operation.
func (c OpCode) Route() Route { return c.info().route }

// Merge returns how the results of the operation from several groups
// combine.
func (c OpCode) Merge() Merge { return c.info().merge }

// GrowsReply reports whether the operation's reply grows with the
// keyspace (KEYS, SCAN): its pipeline segment ends after it, and MULTI
// refuses its command.
func (c OpCode) GrowsReply() bool { return c.info().growsReply }

// Keys returns which fields of the Op name the keys it reads or changes.
func (c OpCode) Keys() KeyFields { return c.info().keys }
