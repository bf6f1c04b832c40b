package cluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/persistence"
)

// Cluster versions: how a cluster of nodes running different releases
// stays one state machine (docs/design.md, "Versions and rolling
// upgrades").
//
// Every release supports the cluster versions up to its own
// (SupportedVersion). A group's log records the version the group runs
// (a version entry, codec.EntryVersion); a log that records none runs
// BaseVersion, the version of v0.1.0, which knew nothing of versions. The
// leader of each group raises the version once every member of the group,
// voter or not, says it supports a higher one (versionLoop, below), and
// from then on the group may use what that version introduced: the gate
// (opNeeds) refuses an operation the group's version does not have yet,
// with a clear error, before it is proposed. So a node never meets an
// entry written by a newer release unless the cluster said it could apply
// it; if it does all the same (a binary rolled back too far, a bug), it
// stops applying the group rather than skip the entry (fsm.go).
//
// Adding an operation, an entry type or a wire format: give it the version
// of the release that introduces it (bumping SupportedVersion when that
// release has no version of its own yet), and follow the failing tests. A
// new engine operation is the common case: its version is its row's in
// the engine's table of operations (engine/ops.go, OpCode.Since);
// TestOpVersionsCoverEveryOpCode fails for a row whose version this build
// does not support. Entry types and error codes have their tables below.
const (
	// BaseVersion is the cluster version of a log that records none:
	// sluice v0.1.0 (commit ae62d5a), the last release without versions.
	BaseVersion uint32 = 1
	// SupportedVersion is the highest cluster version this build runs:
	// v0.3.0's (scripts, hashes, sorted sets and lists, databases; the op
	// fields Args and DB). Version 2 was v0.2.0's (version entries, the
	// ignorable entry flag, the version poll, strings, the rate limit
	// service).
	SupportedVersion uint32 = 3

	// argsVersion is the cluster version that brought the op fields
	// engine.Op.Args and engine.Op.DB (cluster/codec's extArgs, extDB): an
	// op using either needs it, whatever its code, since an older node
	// cannot decode them.
	argsVersion uint32 = 3
)

// releaseOf names the first release that runs each cluster version, for
// messages and the data dir's marker.
func releaseOf(v uint32) string {
	switch v {
	case 1:
		return "v0.1.0"
	case 2:
		return "v0.2.0"
	case 3:
		return "v0.3.0"
	}
	return "a release supporting cluster version " + strconv.FormatUint(uint64(v), 10)
}

// entryVersions gives every log entry type the cluster version from which
// a leader may write it. Every release applies the types it knows whatever
// the cluster version (a log replayed after an upgrade holds old ones).
var entryVersions = map[byte]uint32{
	codec.EntryOps:     1,
	codec.EntryLeader:  1,
	codec.EntryBatch:   1,
	codec.EntryVersion: 2,
}

// snapshotFormats gives the snapshot format version (persistence) a group
// writes at each cluster version: the newest every release of that
// cluster version reads, since a snapshot goes to other members (Raft's
// InstallSnapshot) and stays in the data dir of a node that may be rolled
// back. A release that changes the snapshot format adds its format to its
// own cluster version's row; the older rows keep theirs.
var snapshotFormats = map[uint32]int{
	1: 2, // v0.1.0 reads formats 1 and 2
	2: 3, // v0.2.0 reads formats 1 to 3
	3: persistence.Version,
}

// snapshotFormat is the snapshot format a group at cluster version cv
// writes.
func snapshotFormat(cv uint32) int {
	if f, ok := snapshotFormats[cv]; ok {
		return f
	}
	return persistence.Version
}

// Wire formats between nodes, and the cluster version that introduced
// each:
//
//   - Raft's own RPCs, forwarding ("SLFW\x03"), address announcements
//     ("SLFA\x01") and the group hello ("SLFG\x01"): version 1. The
//     snapshot format: snapshotFormats above.
//   - The version poll ("SLFV\x01", below): version 2. Sent to nodes of
//     any release: one of version 1 drops the unknown hello, which counts
//     as no answer and holds the version, so it needs no gate.
//   - The snapshot header's cluster_version key (fsm.go): version 2,
//     written only when the version is above 1; older releases ignore
//     unknown header keys.
//   - The control channel ("SLFC\x01", control.go): version 3
//     (controlVersion). A node calls its group's members on it only from
//     that version on, and in the legacy hellos before (legacy.go); it
//     serves both.

// codeVersions gives the error codes (internal/errcode) that came after
// cluster version 1 the version that introduced them; every code up to
// errcode.Other is version 1's. A leader answering a forwarded request
// while its group's version is below a code's sends the error as one an
// older follower knows (errorFor): a code it does not know would make it
// reject the whole reply as malformed. TestCodeVersionsCoverEveryCode
// fails for a code without a row.
var codeVersions = map[errcode.Code]uint32{
	errcode.GroupAdminFailed: 2,
	errcode.RemoveUnsafe:     2,
	errcode.MemberConflict:   2,
	errcode.CatchUpStalled:   2,
	errcode.ClusterVersion:   2,
	errcode.ApplyHalted:      2,
	errcode.WrongTypeValue:   2,
	errcode.NotInteger:       2,
	errcode.IncrOverflow:     2,
	errcode.BadExpire:        2,
	errcode.ValueTooLong:     2,
	errcode.LogWriteFailed:   2,
	errcode.Removed:          2,

	errcode.HashNotInteger:     3,
	errcode.HashNotFloat:       3,
	errcode.NaNOrInfinity:      3,
	errcode.ScoreNaN:           3,
	errcode.NoSuchKey:          3,
	errcode.IndexOutOfRange:    3,
	errcode.CollectionTooLarge: 3,
	errcode.NotFloat:           3,
	errcode.NoScript:           3,
	errcode.ScriptCacheFull:    3,
	errcode.NoScripting:        3,
}

// codeVersion is the cluster version that introduced code c.
func codeVersion(c errcode.Code) uint32 {
	if c <= errcode.Other {
		return 1
	}
	if v, ok := codeVersions[c]; ok {
		return v
	}
	return noVersion
}

// errorFor returns err as a member of cluster version cv knows it: itself
// when its code is as old, else Uncertain (for a code of that class) or
// Other with the error's description, which every release renders as
// "ERR <description>". Nil stays nil.
func errorFor(err error, cv uint32) error {
	e := errcode.Of(err)
	if e == nil || codeVersion(e.Code) <= cv {
		return err
	}
	if e.Code.Class() == errcode.MayHaveApplied {
		return &errcode.Error{Code: errcode.Uncertain, Detail: e.Error()}
	}
	return &errcode.Error{Code: errcode.Other, Detail: e.Error()}
}

// errorsFor applies errorFor to every result's error, RL.ALL's included.
func errorsFor(rs []engine.Result, cv uint32) {
	for i := range rs {
		if rs[i].Err != nil {
			rs[i].Err = errorFor(rs[i].Err, cv)
		}
		errorsFor(rs[i].Each, cv)
	}
}

// opNeeds is the cluster version each operation code needs: the version
// of its row in the engine's table of operations (OpCode.Since), or
// noVersion for a code this build does not know. An operation a group's
// version does not have is refused (errcode.ClusterVersion) instead of
// being proposed: a node of an older release would not know how to apply
// it. A table rather than OpCode.Since itself, so that tests can play a
// later release.
type opNeeds [engine.NumOps]uint32

// noVersion is what a code this build does not know needs: no cluster
// version has it.
const noVersion = ^uint32(0)

// opNeedsTable builds the lookup of the rows' versions.
func opNeedsTable() *opNeeds {
	var t opNeeds
	for i := range t {
		t[i] = noVersion
		if c := engine.OpCode(i); c.Known() {
			t[i] = c.Since()
		}
	}
	return &t
}

// need returns the cluster version op needs: its code's, or argsVersion
// when it uses a field that version brought.
func (t *opNeeds) need(op *engine.Op) uint32 {
	v := t[op.Code]
	if (op.Args != nil || op.DB != 0) && v < argsVersion {
		v = argsVersion
	}
	return v
}

// gated reports whether any op of ops is refused at cluster version cv
// (refusal).
func (t *opNeeds) gated(cv uint32, ops []engine.Op) bool {
	for i := range ops {
		if t.need(&ops[i]) > cv || ops[i].Stray() != 0 {
			return true
		}
	}
	return false
}

// refusal returns why op may not be proposed at cluster version cv, or
// nil: it needs a higher version (versionError), or it carries a field its
// row in the engine's table of operations does not name, which the wire
// would carry in another's place or the engine ignore (a bug of the
// caller's).
func (t *opNeeds) refusal(cv uint32, op *engine.Op) error {
	if need := t.need(op); need > cv {
		return versionError(need, cv)
	}
	if f := op.Stray(); f != 0 {
		return internalError("operation %v carries fields %#x that its row in the table of operations does not name", op.Code, f)
	}
	return nil
}

// knows reports whether this build can apply every op of ops.
func (t *opNeeds) knows(ops []engine.Op) (engine.OpCode, bool) {
	for i := range ops {
		if t[ops[i].Code] > SupportedVersion {
			return ops[i].Code, false
		}
	}
	return 0, true
}

// versionError refuses an operation that needs cluster version need while
// the group runs cv (need is noVersion for a code this build does not know).
func versionError(need, cv uint32) error {
	n := int64(need)
	if need == noVersion {
		n = int64(SupportedVersion) + 1
	}
	return &errcode.Error{Code: errcode.ClusterVersion, Num: n, Detail: strconv.FormatUint(uint64(cv), 10)}
}

// The version poll. The leader of a group whose version is below its own
// SupportedVersion asks every other member of the group, voters and
// non-voters, which version it supports, and raises the group's version
// to the lowest answer once every member answered above the current one.
// A member that cannot answer (down, or of a release before versions,
// which drops the unknown hello) holds the version where it is, and is
// asked again after a pause that doubles up to versionPollMaxWait. A
// member that starts, or sees a new leader, tells the leader at once
// (the same exchange, the other way), which asks everyone again.
//
// The exchange is the control channel's method "version"
// (controlmethods.go; before the channel, the hello "SLFV\x01": legacy.go):
// the sender's id and supported version, answered with the receiver's.
const (
	// versionPollPeriod is how often a leader below its supported version
	// looks again.
	versionPollPeriod = time.Second
	// versionPollMaxWait caps the pause before asking again a member that
	// did not answer.
	versionPollMaxWait = 30 * time.Second
)

// versionLoop runs on every node while the group's version is below what
// this build supports: as the leader it polls the members and raises the
// version; as a follower it tells each new leader what it supports.
func (n *Node) versionLoop() {
	t := time.NewTicker(versionPollPeriod)
	defer t.Stop()
	var (
		told   string                       // the leader this follower told last
		wait   = map[string]time.Duration{} // member -> pause after its last failure
		notYet = map[string]time.Time{}     // member -> not asked again before
	)
	for {
		select {
		case <-n.life.closing:
			return
		case id := <-n.version.kick:
			delete(notYet, id)
			delete(wait, id)
		case <-t.C:
		}
		if n.fsm.clusterVersion() >= SupportedVersion || n.fsm.halted() != nil {
			continue
		}
		switch r := n.route(); r.kind {
		case routeForward:
			if _, id := n.raft.LeaderWithID(); string(id) != told {
				told = string(id)
				if _, err := n.exchangeVersion(r.addr); err != nil {
					n.log.Debug("telling the leader this node's cluster version failed (a leader of a release before versions does not know how)", "leader", r.addr, "err", err)
				}
			}
		case routeLocal:
			told = ""
			n.pollVersions(wait, notYet)
		}
	}
}

// versionState is what a node knows of its group's cluster version
// besides what the applied log says (gateVersion), and the version loop's
// wake-up.
type versionState struct {
	// recorded is the cluster version the data dir recorded at start (0
	// for none): this node's log reached it, so the group runs at least
	// that version even while the log replays (gateVersion).
	recorded uint32
	// boot is the cluster version this node bootstrapped its group at,
	// when it did at this start (0 otherwise): the gate trusts it until a
	// leader of the group was ready (gateVersion).
	boot uint32
	// started is when the node started: Ready gives a new node's group
	// versionSettle to reach the newest cluster version (metrics.go).
	started time.Time
	// dataDir is the group's data dir (nil in memory), where the cluster
	// version is recorded as it rises (record).
	dataDir *persistence.DataDir
	// kick wakes versionLoop (wake).
	kick chan string
}

// wake has versionLoop look at the version at once: for member id, which
// told this leader its version, or for a new leader ("").
func (v *versionState) wake(id string) {
	select {
	case v.kick <- id:
	default:
	}
}

// record records in the data dir (if any) that the group's log reached
// cluster version cv, so that a binary that cannot run cv refuses the
// data dir at start.
func (v *versionState) record(cv uint32) error {
	if v.dataDir == nil {
		return nil
	}
	return v.dataDir.RecordClusterVersion(cv, "sluice "+releaseOf(cv)+" or later")
}

// recordVersion records that the log reached cluster version v (the FSM
// calls it as the version rises).
func (n *Node) recordVersion(v uint32) {
	if err := n.version.record(v); err != nil {
		n.log.Error("recording the cluster version in the data dir failed: an older binary started on it would not refuse it",
			"cluster_version", v, "err", err)
	}
}

// gateVersion is the cluster version the gate checks an operation against:
// the applied log's, or the one the data dir recorded at start if higher
// (a restarted node's log replays the version entry a moment later; it
// was committed, so the group runs at least that version), or the version
// this node bootstrapped the group at while no leader of it was ready yet
// (its first leader appends that version before it is: raiseToRecorded).
func (n *Node) gateVersion() uint32 {
	v := max(n.fsm.clusterVersion(), n.version.recorded)
	if n.version.boot > v && !n.fsm.knowsLeaders() {
		v = n.version.boot
	}
	return v
}

// recordBootstrapVersion notes, before this node bootstraps its group,
// that the group starts at this release's cluster version: its members
// bootstrap the same voters with the same release (docs/operations.md), so
// none needs an older version, and the first leader appends the version
// entry before it calls itself ready (raiseToRecorded). The data dir
// records it, so a release before it refuses the directory, and a restart
// before any leader was ready keeps it.
func (n *Node) recordBootstrapVersion() error {
	v := n.cfg.bootstrapVersion
	if v == 0 {
		v = n.advertisedVersion()
	}
	if err := n.version.record(v); err != nil {
		return fmt.Errorf("cluster: bootstrap at cluster version %d: %w", v, err)
	}
	n.version.boot = v
	return nil
}

// raiseToRecorded appends a version entry when this node is the first
// ready leader of a group bootstrapped at a higher cluster version than
// its log runs (recordBootstrapVersion): no leader was ready before (the
// log announced none), so every member is one that bootstrapped the group
// (a join needs a ready leader). A later leader finds the version entry
// in its log, and nothing to do.
func (n *Node) raiseToRecorded() error {
	v := min(max(n.version.recorded, n.version.boot), SupportedVersion)
	if n.fsm.clusterVersion() >= v || v < entryVersions[codec.EntryVersion] || n.fsm.halted() != nil || n.fsm.knowsLeaders() {
		return nil
	}
	if err := n.waitWhileLeader(n.raft.Apply(codec.AppendVersionEntry(nil, v), n.cfg.ClusterTimeout)); err != nil {
		return fmt.Errorf("append the bootstrap's cluster version %d: %w", v, err)
	}
	n.log.Info("a group bootstrapped by this release starts at its cluster version", "cluster_version", v)
	return nil
}

// raiseVersionAlone raises the cluster version of a group whose only
// member is this new leader before it calls itself ready, so that a single
// node (make run) never refuses the newer commands at its start; with other
// members the version loop asks them (they announce themselves first).
func (n *Node) raiseVersionAlone() {
	if n.fsm.clusterVersion() >= SupportedVersion || n.fsm.halted() != nil {
		return
	}
	if servers, err := n.servers(); err != nil || len(servers) != 1 {
		return
	}
	n.pollVersions(map[string]time.Duration{}, map[string]time.Time{})
}

// pollVersions asks the members which versions they support and raises
// the group's version when they all support a higher one.
func (n *Node) pollVersions(wait map[string]time.Duration, notYet map[string]time.Time) {
	servers, err := n.servers()
	if err != nil {
		return
	}
	now := time.Now()
	type member struct{ id, addr string }
	var members []member
	for _, s := range servers {
		id := string(s.ID)
		if id == n.cfg.ID {
			continue
		}
		if now.Before(notYet[id]) {
			return // a member that did not answer lately: no raise yet
		}
		e, ok := n.fsm.leader(id)
		if !ok || e.Forward == "" {
			return // not announced yet: it will be soon, or it is of no release that polls
		}
		members = append(members, member{id, peer.MapAddr(n.cfg.DialMap, e.Forward)})
	}
	target := n.advertisedVersion()
	for _, m := range members {
		v, err := n.exchangeVersion(m.addr)
		if err != nil {
			w := min(max(2*wait[m.id], versionPollPeriod), versionPollMaxWait)
			wait[m.id], notYet[m.id] = w, now.Add(w)
			n.log.Debug("a member did not say which cluster version it supports (down, or of a release before versions)",
				"member", m.id, "err", err, "next_try_in", w)
			return
		}
		delete(wait, m.id)
		target = min(target, v)
	}
	cv := n.fsm.clusterVersion()
	if target <= cv || target < entryVersions[codec.EntryVersion] {
		return
	}
	if err := n.waitWhileLeader(n.raft.Apply(codec.AppendVersionEntry(nil, target), n.cfg.ClusterTimeout)); err != nil {
		n.log.Warn("raising the cluster version failed; will retry", "cluster_version", target, "err", err)
		return
	}
	n.log.Info("every member supports a higher cluster version: raised it", "from", cv, "to", target, "members", len(members)+1)
}

// advertisedVersion is the cluster version this node says it supports.
func (n *Node) advertisedVersion() uint32 {
	if n.cfg.advertiseVersion != 0 {
		return n.cfg.advertiseVersion
	}
	return SupportedVersion
}

// exchangeVersion tells the node at forward address addr which cluster
// version this build supports, and returns the one it supports.
func (n *Node) exchangeVersion(addr string) (uint32, error) {
	v, status, err := call(context.Background(), n, addr, versionMethod, versionReq{id: n.cfg.ID, version: uint64(n.advertisedVersion())})
	if status != forward.StatusOK {
		return 0, err
	}
	if v < 1 || v > 1<<31 {
		return 0, fmt.Errorf("%w: version reply %d", codec.ErrMalformed, v)
	}
	return uint32(v), nil
}

// serve is versionMethod's handler: it answers this build's supported
// version and, on the leader, has the sender's version looked at again at
// once.
func (r versionReq) serve(_ context.Context, n *Node) (uint64, error) {
	if r.id != "" && n.raft.State() == raft.Leader {
		n.version.wake(r.id)
	}
	return uint64(n.advertisedVersion()), nil
}

// ClusterVersion is the cluster version the node's group runs: what the
// applied log recorded (BaseVersion when it recorded none). Something a
// release adds that crosses between nodes (a new wire format, a new entry
// type) is used only once this is at least the version that adds it.
func (n *Node) ClusterVersion() uint32 { return n.fsm.clusterVersion() }

// ClusterVersion is the lowest cluster version of the host's groups: what
// every group can use.
func (h *Host) ClusterVersion() uint32 {
	v := h.nodes[0].ClusterVersion()
	for _, n := range h.nodes[1:] {
		v = min(v, n.ClusterVersion())
	}
	return v
}
