package errcode

// The catalogue: one row per code, the single source of its name, its class
// (what a client may assume), the reply a client sees and the two columns
// docs/design.md's "Error codes" table adds (resp's TestDesignErrorTable
// fails when that table differs from the one this catalogue renders, and
// TestCatalogue here fails for a code without a complete row).
//
// The replies are data: the RESP server (resp/errors.go) is the only code
// that renders them; the engine and the cluster return codes and details
// and never read a text.
//
// A reply is a format with placeholders the error's fields fill in:
//
//	{detail}   Error.Detail as it is
//	{quoted}   Error.Detail as a Go-quoted string
//	{key}      Error.Detail quoted as the RESP server quotes an argument ('k', \xHH for other bytes)
//	{num}      Error.Num in decimal
//	{duration} Error.Num as a time.Duration (ns)
//	{cause}    Error.Cause: a coded cause's own reply, else its text
//	{subcause} Error.Cause as {cause}, without a leading "ERR " (a cause inside a sentence)
//
// Bare, when set, is the reply for an error whose placeholders have
// nothing to fill in (an empty Detail, a zero Num).

// placeholders are the placeholders a Reply may hold.
var placeholders = []string{"{detail}", "{quoted}", "{key}", "{num}", "{duration}", "{cause}", "{subcause}"}

// Entry is a code's row of the catalogue.
type Entry struct {
	Name     string // the code's name in logs (Code.String)
	Class    Class  // what a client may assume after it
	Reply    string // the reply text, without the leading '-' (a format, see above)
	Bare     string // the reply without details, if it differs
	Producer string // docs: what returns it
	Assume   string // docs: applied? retry?
}

// catalogue is indexed by Code; every code below NumCodes has a row.
var catalogue = [NumCodes]Entry{
	Internal: {Name: "internal error", Class: NotApplied,
		Reply:    "ERR internal error: {detail}",
		Producer: "cluster (a log entry that did not apply, a caller's bug)",
		Assume:   "a bug: do not retry blindly"},
	WrongType: {Name: "wrong type", Class: NotApplied,
		Reply:    "WRONGTYPE Operation against a key holding the wrong kind of limiter",
		Producer: "engine",
		Assume:   "not applied; fix the command"},
	BadRule: {Name: "bad rule", Class: NotApplied,
		Reply:    "ERR invalid limiter parameters: {detail}",
		Bare:     "ERR invalid limiter parameters",
		Producer: "engine (rules, costs, lease tokens, RL.ALL's limits, imports); the server checks arguments first with its own texts",
		Assume:   "not applied; fix the command"},
	ClockBackwards: {Name: "clock backwards", Class: NotApplied,
		Reply:    "ERR the clock never goes backwards: freeze time is before the current time ({detail})",
		Bare:     "ERR the clock never goes backwards: freeze time is before the current time",
		Producer: "engine (DEBUG CLOCK FREEZE)",
		Assume:   "not applied"},
	OOM: {Name: "out of memory", Class: NotApplied,
		Reply:    "OOM command not allowed when used memory > 'maxmemory'.",
		Producer: "engine, creating a key over maxmemory",
		Assume:   "not applied; existing keys still work"},
	KeyLimit: {Name: "key limit reached", Class: NotApplied,
		Reply:    "OOM command not allowed: the key limit is reached (max-keys {num})",
		Bare:     "OOM command not allowed: the key limit is reached",
		Producer: "engine, creating a key over max-keys",
		Assume:   "not applied; existing keys still work"},
	DuplicateKey: {Name: "duplicate key", Class: NotApplied,
		Reply:    "ERR duplicate key {key} in RL.ALL",
		Bare:     "ERR duplicate key in RL.ALL",
		Producer: "engine (the server checks first, with the same text)",
		Assume:   "not applied"},
	ClusterDown: {Name: "cluster down", Class: Unavailable,
		Reply:    "CLUSTERDOWN no quorum: the cluster could not commit within {duration}",
		Bare:     "CLUSTERDOWN no quorum: the cluster could not commit in time",
		Producer: "cluster: no leader or no majority within the cluster timeout, a request still queued when its deadline passed",
		Assume:   "certainly not applied; retry"},
	ShuttingDown: {Name: "shutting down", Class: Unavailable,
		Reply:    "CLUSTERDOWN this node is shutting down",
		Producer: "cluster, after Close began",
		Assume:   "certainly not applied; retry on another node"},
	Loading: {Name: "loading", Class: Unavailable,
		Reply:    "LOADING sluice is loading the dataset in memory",
		Producer: "cluster, when the node replayed its log and knew no leader to forward to for the whole cluster timeout",
		Assume:   "not applied; retry later"},
	Uncertain: {Name: "uncertain", Class: MayHaveApplied,
		Reply:    "UNCERTAIN the command may have been applied ({detail})",
		Bare:     "UNCERTAIN the command may have been applied",
		Producer: "cluster (a write run in every group that failed in some: `applied in some shards only`); its sentinel `cluster.ErrUncertain` matches the whole class",
		Assume:   "may have been applied; do not retry blindly"},
	CommitTimeout: {Name: "commit timeout", Class: MayHaveApplied,
		Reply:    "UNCERTAIN no answer from the cluster within {duration} after the command was submitted; it may have been applied",
		Producer: "cluster: an entry handed to Raft, or a request written to the leader, with no answer in time",
		Assume:   "may have been applied"},
	LostQuorum: {Name: "lost quorum", Class: MayHaveApplied,
		Reply:    "UNCERTAIN leadership was lost while committing and no majority answered within {duration}; the command may have been applied",
		Producer: "cluster (batcher)",
		Assume:   "may have been applied"},
	OutcomeUnknown: {Name: "outcome unknown", Class: MayHaveApplied,
		Reply:    "UNCERTAIN leadership changed while committing; the command may have been applied",
		Producer: "cluster (batcher)",
		Assume:   "may have been applied"},
	DuplicateBatch: {Name: "duplicate batch", Class: MayHaveApplied,
		Reply:    "UNCERTAIN the command was re-sent after a broken connection and had already been applied; its result is lost",
		Producer: "cluster (the FSM's at-most-once check)",
		Assume:   "applied once, result lost"},
	NotLeader: {Name: "not the leader", Class: NotApplied,
		Reply:    "ERR not the leader; leader is {detail}",
		Bare:     "ERR not the leader; the leader is unknown",
		Producer: "cluster admin commands on a follower",
		Assume:   "not applied; send to the leader"},
	BadNodeID: {Name: "bad node id", Class: NotApplied,
		Reply:    "ERR invalid node id {quoted}",
		Producer: "RAFT.JOIN",
		Assume:   "not applied"},
	BadRaftAddr: {Name: "bad raft address", Class: NotApplied,
		Reply:    "ERR invalid raft address: {detail}",
		Producer: "RAFT.JOIN",
		Assume:   "not applied"},
	NoSuchNode: {Name: "no such node", Class: NotApplied,
		Reply:    "ERR no such node {quoted}",
		Producer: "RAFT.REMOVE",
		Assume:   "not applied"},
	NoSuchVoter: {Name: "no such voter", Class: NotApplied,
		Reply:    "ERR no such voter {quoted}",
		Producer: "RAFT.TRANSFER",
		Assume:   "not applied"},
	SnapshotTimeout: {Name: "snapshot timeout", Class: NotApplied,
		Reply:    "ERR snapshot did not finish within {duration}",
		Producer: "RAFT.SNAPSHOT",
		Assume:   "the snapshot may still finish"},
	AdminFailed: {Name: "admin command failed", Class: NotApplied,
		Reply:    "ERR {detail} failed: {cause}",
		Producer: "RAFT.JOIN/REMOVE/TRANSFER/SNAPSHOT when Raft refuses (the detail names the command)",
		Assume:   "see the cause"},
	BadReply: {Name: "bad reply from the leader", Class: MayHaveApplied,
		Reply:    "UNCERTAIN the leader's reply did not decode; the command may have been applied",
		Producer: "cluster (follower)",
		Assume:   "may have been applied"},
	ConnLost: {Name: "connection to the leader lost", Class: MayHaveApplied,
		Reply:    "UNCERTAIN the connection to the leader broke after the command was sent; it may have been applied",
		Producer: "cluster (follower, after its re-sends)",
		Assume:   "may have been applied"},
	Other: {Name: "error", Class: NotApplied,
		Reply:    "ERR {detail}",
		Producer: "an error without a code (a Go error from below, such as a cancelled context) as it crosses the forwarding wire",
		Assume:   "see the text"},
	GroupAdminFailed: {Name: "membership change failed in a group", Class: NotApplied,
		Reply:    "ERR {detail} failed in group {num}: {subcause}",
		Producer: "RAFT.JOIN/REMOVE: a step failed in one group (the detail names the command); the steps done stay done",
		Assume:   "send the same command again to resume"},
	RemoveUnsafe: {Name: "removal would cost a majority", Class: NotApplied,
		Reply:    "ERR refused: removing {quoted} would leave group {num} without a majority of healthy voters",
		Producer: "RAFT.REMOVE (the strict reconfiguration check)",
		Assume:   "not applied; bring the unhealthy members back first"},
	MemberConflict: {Name: "member conflict", Class: NotApplied,
		Reply:    "ERR conflicts with member {detail}: its id or raft address is taken (RAFT.REMOVE it first)",
		Producer: "RAFT.JOIN",
		Assume:   "not applied"},
	CatchUpStalled: {Name: "catch-up stalled", Class: NotApplied,
		Reply:    "ERR the new node stopped catching up with group {num} ({detail}); it stays a non-voter: send RAFT.JOIN again to resume",
		Producer: "RAFT.JOIN, when the new node's state stops growing",
		Assume:   "the node stays a non-voter; send RAFT.JOIN again"},
	ClusterVersion: {Name: "cluster version too low", Class: NotApplied,
		Reply:    "ERR this command needs cluster version {num}, but the cluster runs version {detail}: upgrade every node first (RAFT.STATUS shows cluster_version)",
		Producer: "cluster (the version gate), for an operation newer than the group's cluster version",
		Assume:   "not applied; upgrade every node"},
	ApplyHalted: {Name: "log apply halted", Class: NotApplied,
		Reply:    "ERR this node stopped applying the log: {detail}; it serves this group no more until it runs a binary that can apply it (RAFT.STATUS shows apply_error)",
		Bare:     "ERR this node stopped applying the log; it serves this group no more until it runs a binary that can apply it (RAFT.STATUS shows apply_error)",
		Producer: "cluster, on a node that met a log entry it cannot apply",
		Assume:   "not applied; send it to another node, run a newer binary here"},
	WrongTypeValue: {Name: "wrong type of value", Class: NotApplied,
		Reply:    "WRONGTYPE Operation against a key holding the wrong kind of value",
		Producer: "engine: a string command on a limiter key (Redis's own text)",
		Assume:   "not applied; fix the command"},
	NotInteger: {Name: "not an integer", Class: NotApplied,
		Reply:    "ERR value is not an integer or out of range",
		Producer: "engine: INCRBY on a value that is not a 64-bit integer, GETEX with a bad expiry on an existing key; the server checks arguments first with the same text",
		Assume:   "not applied"},
	IncrOverflow: {Name: "increment overflow", Class: NotApplied,
		Reply:    "ERR increment or decrement would overflow",
		Producer: "engine: INCRBY/DECRBY past a 64-bit integer",
		Assume:   "not applied"},
	BadExpire: {Name: "invalid expire time", Class: NotApplied,
		Reply:    "ERR invalid expire time in '{detail}' command",
		Bare:     "ERR invalid expire time",
		Producer: "engine: an expiry that overflows once added to the log's time (the server fills in the command's name)",
		Assume:   "not applied"},
	ValueTooLong: {Name: "value too long", Class: NotApplied,
		Reply:    "ERR value is too long: at most {num} bytes (max-value-len)",
		Producer: "engine, and the server first: a string value over --max-value-len",
		Assume:   "not applied"},
	LogWriteFailed: {Name: "log write failed", Class: NotApplied,
		Reply:    "MISCONF the Raft log cannot be written, so commands that need it are refused (not applied) until it can: {detail}",
		Bare:     "MISCONF the Raft log cannot be written, so commands that need it are refused (not applied) until it can",
		Producer: "cluster: a full disk or an I/O error on this node's log (the failed entry was never stored or replicated)",
		Assume:   "certainly not applied; retry, or another node; the node serves again by itself once it can write"},
	Removed: {Name: "removed from the cluster", Class: NotApplied,
		Reply:    "ERR this node was removed from the cluster (RAFT.REMOVE) and serves no more as a member: send commands to another node; to serve again, wipe its data dir and RAFT.JOIN it (RAFT.STATUS shows removed:1)",
		Producer: "cluster, on a node whose group's configuration no longer has it",
		Assume:   "not applied; send it to another node"},
	NotFloat: {Name: "not a float", Class: NotApplied,
		Reply:    "ERR value is not a valid float",
		Producer: "engine: INCRBYFLOAT on a value that is not a float; the server checks the increment first with the same text",
		Assume:   "not applied"},
	IncrNaN: {Name: "increment would produce NaN or Infinity", Class: NotApplied,
		Reply:    "ERR increment would produce NaN or Infinity",
		Producer: "engine: INCRBYFLOAT whose result is not a finite 64-bit float",
		Assume:   "not applied"},
}

// Entry returns c's row of the catalogue; a zero Entry for a code beyond
// NumCodes (one a newer node sent).
func (c Code) Entry() Entry {
	if c < NumCodes {
		return catalogue[c]
	}
	return Entry{}
}
