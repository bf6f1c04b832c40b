package engine

import "strconv"

// The table of operations: one row per OpCode saying what the rest of
// sluice must know about the operation without running it (docs/design.md,
// "A new operation"). A row holds everything about an operation but its
// algorithm, which the row names: its name, the cluster version that
// introduced it, the Op fields it uses (which the wire carries), the
// Result number it answers in, whether it mutates, how it is routed and
// its results merge, and which fields name its keys. Engine.Apply runs an
// op through its row; cluster and cluster/codec read the rows through
// OpCode's methods.

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

// OpFields is a set of Op fields: those an operation uses, as its row
// names them. cluster/codec derives from it which field travels in the
// wire's shared slots (see FieldCost), and cluster refuses an op carrying
// a field its row does not name before it is proposed.
type OpFields uint32

// The fields. Each (but Each, which is not replicated) is one bit.
const (
	FieldRule OpFields = 1 << iota
	// The four numbers that travel in the wire's cost slot (cluster/codec):
	// a row names at most one of them.
	FieldCost  // Op.Cost: a decision's cost
	FieldDelta // Op.Delta: an increment
	FieldCount // Op.Count: SCAN's COUNT
	FieldClock // Op.Clock: the clock ops' argument
	// The two numbers that travel in the wire's cursor slot: a row names
	// at most one of them.
	FieldCursor // Op.Cursor: SCAN's cursor
	FieldShadow // Op.Shadow: the rate limit service's shadow mask
	FieldKey
	FieldPattern
	FieldToken
	FieldAll
	FieldValue
	FieldExpire
	FieldFlags
	FieldArgs
	// FieldDB: Op.DB, which every op may carry (the database of its keys,
	// or the one it acts on), so that no row needs to name it.
	FieldDB
	// FieldNumKeys: Op.NumKeys, a script's number of keys, in the cost
	// slot.
	FieldNumKeys

	// CostSlot and CursorSlot are the fields that share the wire's cost
	// and cursor slots.
	CostSlot   = FieldCost | FieldDelta | FieldCount | FieldClock | FieldNumKeys
	CursorSlot = FieldCursor | FieldShadow
)

// Fields returns the set of op's fields that are not zero (Each aside).
func (op *Op) Fields() OpFields {
	var f OpFields
	set := func(b bool, bit OpFields) {
		if b {
			f |= bit
		}
	}
	set(op.Rule != (Rule{}), FieldRule)
	set(op.Cost != 0, FieldCost)
	set(op.Delta != 0, FieldDelta)
	set(op.Count != 0, FieldCount)
	set(op.Clock != 0, FieldClock)
	set(op.NumKeys != 0, FieldNumKeys)
	set(op.Cursor != 0, FieldCursor)
	set(op.Shadow != 0, FieldShadow)
	set(len(op.Key) > 0, FieldKey)
	set(len(op.Pattern) > 0, FieldPattern)
	set(len(op.Token) > 0, FieldToken)
	set(len(op.All) > 0, FieldAll)
	set(len(op.Value) > 0, FieldValue)
	set(op.Expire != 0, FieldExpire)
	set(op.Flags != 0, FieldFlags)
	set(len(op.Args) > 0, FieldArgs)
	set(op.DB != 0, FieldDB)
	return f
}

// Stray returns the fields op carries that its row does not name (none
// for a correct op): cluster refuses such an op rather than replicate a
// field the wire would carry in another's place, or drop.
func (op *Op) Stray() OpFields { return op.Fields() &^ (op.Code.info().fields | FieldDB) }

// Answer says which of Result's numbers an operation answers in: Count,
// TTL or Time. They travel in one field of the wire (cluster/codec), which
// the op's row chooses.
type Answer uint8

// The answers. The zero Answer is Count.
const (
	AnswerCount Answer = iota // Result.Count
	AnswerTTL                 // Result.TTL
	AnswerTime                // Result.Time
)

// applyFunc runs one operation at now, the clock's time for wall (which
// only the clock operations read), and writes its whole result to *res
// (Apply's results[i]: written in place, a Result is not copied once more
// on its way out). An op whose row sets clock moves the clock: Apply reads
// the time again after it.
type applyFunc func(e *Engine, wall, now int64, op *Op, res *Result)

// opInfo is one row of the table.
type opInfo struct {
	name string // the constant's name, as OpCode.String returns it
	// apply is the operation's algorithm; nil for a code without one.
	apply applyFunc
	// since is the cluster version that introduced the operation
	// (cluster/version.go): a group refuses it below that version.
	since uint32
	// fields are the Op fields the operation uses (FieldDB aside: every
	// op may carry it): cluster/codec chooses by them which field travels
	// in a shared slot of the wire, and cluster refuses an op carrying
	// another.
	fields OpFields
	// answer is the Result number the op answers in (AnswerCount unless
	// it says otherwise).
	answer Answer
	// mutates: the op can change state, so it goes through the replicated
	// log, CLIENT TRACKING's NOLOOP sees it, and a failure in some groups
	// of an op run in several is UNCERTAIN.
	mutates bool
	// clock: the op moves the engine's clock (the ops after it in a batch
	// run at the new time).
	clock bool
	route Route
	merge Merge
	// growsReply: the reply grows with the keyspace (KEYS, SCAN), so the
	// op ends its pipeline segment and MULTI refuses its command.
	growsReply bool
	keys       KeyFields
}

// NumOps bounds the operation codes: every OpCode is below it (an OpCode
// is a byte). An untyped constant, so that it is no OpCode itself.
const NumOps = 256

// Rows of the usual shapes, which the table's rows start from.
var (
	// keyRead: a read of Op.Key, in the group owning its slot.
	keyRead = opInfo{route: RouteKey, merge: MergeOne, keys: KeysKey}
	// keyWrite: a change of Op.Key, in the group owning its slot.
	keyWrite = opInfo{mutates: true, route: RouteKey, merge: MergeOne, keys: KeysKey}
)

// opRows is the table, indexed by OpCode; a code without an operation has a
// zero row (no name, no apply). Read-only. A new operation is one row
// here and its algorithm (docs/design.md, "A new operation").
var opRows = [NumOps]opInfo{
	OpDecide:      row(keyWrite, "OpDecide", 1, (*Engine).opDecide, FieldRule|FieldCost|FieldKey),
	OpPeek:        row(keyRead, "OpPeek", 1, (*Engine).opPeek, FieldKey),
	OpDelete:      row(keyWrite, "OpDelete", 1, (*Engine).opDelete, FieldKey),
	OpExists:      row(keyRead, "OpExists", 1, (*Engine).opInspect, FieldKey),
	OpType:        row(keyRead, "OpType", 1, (*Engine).opInspect, FieldKey),
	OpTTL:         answers(AnswerTTL, row(keyRead, "OpTTL", 1, (*Engine).opInspect, FieldKey)),
	OpCount:       row(opInfo{route: RouteEvery, merge: MergeSum}, "OpCount", 1, (*Engine).opCount, 0),
	OpScan:        row(opInfo{route: RouteCursor, merge: MergeOne, growsReply: true}, "OpScan", 1, (*Engine).opScan, FieldRule|FieldCount|FieldCursor|FieldPattern),
	OpKeys:        row(opInfo{route: RouteEvery, merge: MergeConcat, growsReply: true}, "OpKeys", 1, (*Engine).opKeys, FieldPattern),
	OpFlush:       row(opInfo{mutates: true, route: RouteEvery, merge: MergeSum, keys: KeysEvery}, "OpFlush", 1, (*Engine).opFlush, 0),
	OpTimeWarp:    row(clockOp, "OpTimeWarp", 1, (*Engine).opTimeWarp, FieldClock),
	OpClockFreeze: row(clockOp, "OpClockFreeze", 1, (*Engine).opClockFreeze, FieldClock),
	OpClockResume: row(clockOp, "OpClockResume", 1, (*Engine).opClockResume, 0),
	OpTime:        answers(AnswerTime, row(opInfo{route: RouteGroup0, merge: MergeOne}, "OpTime", 1, (*Engine).opTime, 0)),
	OpAll:         row(allWrite, "OpAll", 1, (*Engine).opAll, FieldAll),
	OpAcquire:     row(keyWrite, "OpAcquire", 1, (*Engine).opAcquire, FieldRule|FieldCost|FieldKey|FieldToken),
	OpRelease:     row(keyWrite, "OpRelease", 1, (*Engine).opRelease, FieldKey|FieldToken),

	// v0.2.0: the Redis string commands (strings.go).
	OpGet:        row(keyRead, "OpGet", 2, strOp((*Engine).strGet), FieldKey),
	OpSet:        row(keyWrite, "OpSet", 2, strOp((*Engine).strSet), FieldKey|FieldValue|FieldExpire|FieldFlags),
	OpIncrBy:     row(keyWrite, "OpIncrBy", 2, strOp((*Engine).strIncr), FieldKey|FieldDelta),
	OpGetDel:     row(keyWrite, "OpGetDel", 2, strOp((*Engine).strGetDel), FieldKey),
	OpGetEx:      row(keyWrite, "OpGetEx", 2, strOp((*Engine).strGetEx), FieldKey|FieldExpire|FieldFlags),
	OpExpire:     row(keyWrite, "OpExpire", 2, strOp((*Engine).strExpire), FieldKey|FieldExpire|FieldFlags),
	OpPersist:    row(keyWrite, "OpPersist", 2, strOp((*Engine).strPersist), FieldKey),
	OpStrlen:     row(keyRead, "OpStrlen", 2, strOp((*Engine).strStrlen), FieldKey),
	OpExpireTime: answers(AnswerTime, row(keyRead, "OpExpireTime", 2, strOp((*Engine).strExpireTime), FieldKey)),

	// v0.3.0: INCRBYFLOAT (strings.go): the increment's text in Value.
	OpIncrByFloat: row(keyWrite, "OpIncrByFloat", 3, strOp((*Engine).strIncrFloat), FieldKey|FieldValue),

	// v0.3.0: WATCH (watch.go), through the log so that every replica's
	// table is the same; routed by Key, which they read but never change
	// (the watcher is not told of them: Engine.notify). OpWatchCheck's
	// Count is how many ops after it the transaction holds.
	OpWatch:      row(keyWrite, "OpWatch", 3, (*Engine).opWatch, FieldKey),
	OpWatchCheck: row(keyWrite, "OpWatchCheck", 3, (*Engine).opWatchCheck, FieldKey|FieldArgs|FieldCount),

	// v0.3.0: databases (databases.go). SWAPDB and MOVE name the other
	// database in Count.
	OpFlushDB: row(opInfo{mutates: true, route: RouteEvery, merge: MergeSum, keys: KeysEvery}, "OpFlushDB", 3, (*Engine).opFlushDB, 0),
	OpSwapDB:  row(opInfo{mutates: true, route: RouteEvery, merge: MergeFirst, keys: KeysEvery}, "OpSwapDB", 3, (*Engine).opSwapDB, FieldCount),
	OpMove:    row(keyWrite, "OpMove", 3, (*Engine).opMove, FieldKey|FieldCount),

	// v0.2.0: Envoy's rate limit service (ratelimit.go). Every key of a
	// request carries its domain as the hash tag (rls), so they share one
	// slot: All[0].Key routes it.
	OpRateLimit: answers(AnswerTime, row(allWrite, "OpRateLimit", 2, (*Engine).opRateLimit, FieldAll|FieldShadow)),

	// v0.3.0: hashes, sorted sets and lists (colls.go). Their replies grow
	// with one key's collection, bounded by max-collection-len, not with
	// the keyspace: none is growsReply, so HGETALL, ZRANGE and LRANGE run
	// in MULTI as in Redis (docs/design.md, "Collections").
	OpHSet:         row(keyWrite, "OpHSet", 3, collApply, FieldKey|FieldArgs|FieldFlags),
	OpHGet:         row(keyRead, "OpHGet", 3, collApply, FieldKey|FieldArgs),
	OpHMGet:        row(keyRead, "OpHMGet", 3, collApply, FieldKey|FieldArgs),
	OpHGetAll:      row(keyRead, "OpHGetAll", 3, collApply, FieldKey|FieldFlags|FieldPattern),
	OpHDel:         row(keyWrite, "OpHDel", 3, collApply, FieldKey|FieldArgs),
	OpHLen:         row(keyRead, "OpHLen", 3, collApply, FieldKey),
	OpHIncrBy:      row(keyWrite, "OpHIncrBy", 3, collApply, FieldKey|FieldArgs|FieldDelta),
	OpHIncrByFloat: row(keyWrite, "OpHIncrByFloat", 3, collApply, FieldKey|FieldArgs),
	OpZAdd:         row(keyWrite, "OpZAdd", 3, collApply, FieldKey|FieldArgs|FieldFlags),
	OpZRem:         row(keyWrite, "OpZRem", 3, collApply, FieldKey|FieldArgs),
	OpZCard:        row(keyRead, "OpZCard", 3, collApply, FieldKey),
	OpZScore:       row(keyRead, "OpZScore", 3, collApply, FieldKey|FieldArgs),
	OpZRank:        row(keyRead, "OpZRank", 3, collApply, FieldKey|FieldArgs|FieldFlags),
	OpZRange:       row(keyRead, "OpZRange", 3, collApply, FieldKey|FieldArgs|FieldFlags),
	OpZRemRange:    row(keyWrite, "OpZRemRange", 3, collApply, FieldKey|FieldArgs|FieldFlags),
	OpZPop:         row(keyWrite, "OpZPop", 3, collApply, FieldKey|FieldCount|FieldFlags),
	OpLPush:        row(keyWrite, "OpLPush", 3, collApply, FieldKey|FieldArgs|FieldFlags),
	OpLPop:         row(keyWrite, "OpLPop", 3, collApply, FieldKey|FieldCount|FieldFlags),
	OpLLen:         row(keyRead, "OpLLen", 3, collApply, FieldKey),
	OpLIndex:       row(keyRead, "OpLIndex", 3, collApply, FieldKey|FieldArgs),
	OpLRange:       row(keyRead, "OpLRange", 3, collApply, FieldKey|FieldArgs),
	OpLTrim:        row(keyWrite, "OpLTrim", 3, collApply, FieldKey|FieldArgs),
	OpLSet:         row(keyWrite, "OpLSet", 3, collApply, FieldKey|FieldArgs),
	OpLRem:         row(keyWrite, "OpLRem", 3, collApply, FieldKey|FieldArgs),
	// v0.3.0: RENAME and scripts (scripts.go). RENAME's keys share a slot
	// (the server checks): Key routes it. A script runs in the group of
	// its first key (Key; group 0 without keys); its nested ops tell the
	// watcher of their own keys. The script cache is each group's:
	// SCRIPT LOAD and FLUSH reach every group, EXISTS asks group 0.
	OpRename:       row(keyWrite, "OpRename", 3, (*Engine).opRename, FieldKey|FieldArgs|FieldFlags),
	OpEval:         row(keyWrite, "OpEval", 3, (*Engine).opEval, FieldKey|FieldValue|FieldArgs|FieldNumKeys|FieldFlags),
	OpEvalSha:      row(keyWrite, "OpEvalSha", 3, (*Engine).opEval, FieldKey|FieldValue|FieldArgs|FieldNumKeys|FieldFlags),
	OpScriptLoad:   row(opInfo{mutates: true, route: RouteEvery, merge: MergeFirst}, "OpScriptLoad", 3, (*Engine).opScript, FieldValue),
	OpScriptExists: row(opInfo{route: RouteGroup0, merge: MergeOne}, "OpScriptExists", 3, (*Engine).opScript, FieldArgs),
	OpScriptFlush:  row(opInfo{mutates: true, route: RouteEvery, merge: MergeFirst}, "OpScriptFlush", 3, (*Engine).opScript, 0),
}

var (
	// clockOp: a clock operation, run in every group alike.
	clockOp = opInfo{mutates: true, clock: true, route: RouteEvery, merge: MergeFirst}
	// allWrite: a change of the keys of Op.All, routed by All[0].Key.
	allWrite = opInfo{mutates: true, route: RouteKey, merge: MergeOne, keys: KeysAll}
)

// row fills a row of shape base with the operation's name, the cluster
// version that introduced it, its algorithm and the Op fields it uses.
func row(base opInfo, name string, since uint32, apply applyFunc, fields OpFields) opInfo {
	base.name, base.since, base.apply, base.fields = name, since, apply, fields
	return base
}

// answers sets the Result number a row answers in.
func answers(a Answer, r opInfo) opInfo {
	r.answer = a
	return r
}

// unknownOp is the row of a code without an operation (an op from a newer
// build, refused by the engine and by the cluster's version gate): routed
// by Op.Key as any keyed op, a read.
var unknownOp = opInfo{route: RouteKey, merge: MergeOne, keys: KeysKey}

// info returns c's row.
func (c OpCode) info() *opInfo {
	if opRows[c].name != "" {
		return &opRows[c]
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

// Known reports whether the engine has the operation (it has a row).
func (c OpCode) Known() bool { return opRows[c].apply != nil }

// Since returns the cluster version that introduced the operation
// (cluster/version.go), 0 for a code without an operation.
func (c OpCode) Since() uint32 { return opRows[c].since }

// Fields returns the Op fields the operation uses (FieldDB aside: every
// op may carry it).
func (c OpCode) Fields() OpFields { return c.info().fields }

// Answer returns which Result number the operation answers in.
func (c OpCode) Answer() Answer { return c.info().answer }
