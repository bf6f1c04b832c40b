package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/persistence"
)

// opsEntry encodes ops as one ops entry stamped at stamp.
func opsEntry(stamp int64, ops ...engine.Op) []byte {
	b := codec.AppendOpsEntryHeader(nil, stamp, len(ops))
	for i := range ops {
		b = codec.AppendOp(b, &ops[i])
	}
	return b
}

// peekRemaining is what the engine says is left of key at stamp.
func peekRemaining(e *engine.Engine, stamp int64, key string) int64 {
	res := make([]engine.Result, 1)
	e.Apply(stamp, []engine.Op{{Code: engine.OpPeek, Key: []byte(key)}}, res)
	return res[0].Remaining
}

// TestFSMHaltsOnEntryItCannotApply: an entry the FSM cannot apply stops it
// there (nothing later applies, no snapshot claims it), unless the entry is
// marked ignorable; it is never skipped.
func TestFSMHaltsOnEntryItCannotApply(t *testing.T) {
	const stamp = int64(1e18)
	good := opsEntry(stamp, decide("a", tokenRule, 1))
	unknownOp := opsEntry(stamp, engine.Op{Code: 250, Key: []byte("a")})
	tests := []struct {
		name    string
		entry   []byte
		halts   bool
		errLike string
	}{
		{"unknown entry type", []byte{0x09, 1, 2, 3}, true, "unknown entry type 0x09"},
		{"truncated ops entry", good[:len(good)-2], true, "malformed entry"},
		{"unknown field bits", append(opsEntry(stamp)[:len(opsEntry(stamp))-1], 1, byte(engine.OpDecide), 0x80 /* the extension bit */, 0x40), true, "unknown extension mask"},
		{"operation unknown to this build", unknownOp, true, "operation code 250 is unknown"},
		{"cluster version above this build's", codec.AppendVersionEntry(nil, SupportedVersion+1), true, "raises the cluster version to " + strconv.Itoa(int(SupportedVersion)+1)},
		{"ignorable entry of an unknown type", []byte{codec.EntryIgnorable | 0x09, 1, 2, 3}, false, ""},
		{"ignorable entry that does not decode", []byte{codec.EntryIgnorable | codec.EntryOps, 0xff}, false, ""},
		{"known type marked ignorable", append([]byte{codec.EntryIgnorable | codec.EntryOps}, good[1:]...), false, ""},
		{"cluster version this build supports", codec.AppendVersionEntry(nil, SupportedVersion), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := engine.New(engine.Config{Stripes: 4})
			f := newFSM(eng, testLogger(t), nil)
			halts := 0
			f.onHalt = func() { halts++ }
			f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: good})
			r := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: tt.entry})
			// Raft hands every later entry in order: none may apply.
			later := f.ApplyBatch([]*raft.Log{
				{Index: 3, Type: raft.LogCommand, Data: good},
				{Index: 4, Type: raft.LogCommand, Data: good},
			})
			h := f.halted()
			if !tt.halts {
				if h != nil {
					t.Fatalf("halted at %s", h)
				}
				want := tokenRule.Limit - 3
				if tt.name == "known type marked ignorable" {
					want-- // applied as the ops entry it is
				}
				if got := peekRemaining(eng, stamp, "a"); got != want || f.applied.Load() != 4 {
					t.Fatalf("remaining %d (want %d), applied %d (want 4)", got, want, f.applied.Load())
				}
				return
			}
			if h == nil || h.index != 2 || !strings.Contains(h.String(), tt.errLike) || halts != 1 {
				t.Fatalf("halt %v (want at log index 2 saying %q), onHalt called %d times", h, tt.errLike, halts)
			}
			for i, resp := range append([]any{r}, later...) {
				if err, ok := resp.(error); !ok || !errcode.Is(err, errcode.ApplyHalted) {
					t.Fatalf("response %d: %v, want an ApplyHalted error", i, resp)
				}
			}
			if got := peekRemaining(eng, stamp, "a"); got != tokenRule.Limit-1 {
				t.Fatalf("remaining %d: entries after the halt were applied", got)
			}
			if f.applied.Load() != 1 {
				t.Fatalf("applied index %d, want 1 (the last entry applied)", f.applied.Load())
			}
			if _, err := f.Snapshot(); err == nil {
				t.Fatal("a halted FSM took a snapshot: it would claim entries it never applied")
			}
		})
	}
}

// TestClusterVersionInSnapshots: the version travels in snapshots, and a
// version 1 snapshot carries no key for it (what v0.1.0 writes and reads).
func TestClusterVersionInSnapshots(t *testing.T) {
	snap := func(f *fsm) []byte {
		s, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sink := &memSink{}
		if err := s.Persist(sink); err != nil {
			t.Fatal(err)
		}
		return sink.Bytes()
	}
	f := newFSM(engine.New(engine.Config{Stripes: 4}), testLogger(t), nil)
	if f.clusterVersion() != BaseVersion {
		t.Fatalf("a new FSM runs version %d", f.clusterVersion())
	}
	v1 := snap(f)
	if bytes.Contains(v1, []byte(metaVersion)) {
		t.Fatal("a version 1 snapshot names the cluster version")
	}
	if got := int(v1[len(persistence.Magic)]); got != snapshotFormats[1] || got > 2 {
		t.Fatalf("a version 1 cluster writes snapshot format %d, want %d (what v0.1.0 reads)", got, snapshotFormats[1])
	}
	var recorded []uint32
	f.onVersion = func(v uint32) { recorded = append(recorded, v) }
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: codec.AppendVersionEntry(nil, 2)})
	f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: codec.AppendVersionEntry(nil, 1)}) // never down
	if f.clusterVersion() != 2 || len(recorded) != 1 || recorded[0] != 2 {
		t.Fatalf("version %d, recorded %v", f.clusterVersion(), recorded)
	}
	v2 := snap(f)
	g := newFSM(engine.New(engine.Config{Stripes: 4}), testLogger(t), nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(v2))); err != nil || g.clusterVersion() != 2 {
		t.Fatalf("restored version %d, %v", g.clusterVersion(), err)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(v1))); err != nil || g.clusterVersion() != BaseVersion {
		t.Fatalf("restored a version 1 snapshot: version %d, %v", g.clusterVersion(), err)
	}
	// The header's keys, as an older release decodes them: the version is
	// one more key it ignores.
	h, err := persistence.Decode(bytes.NewReader(v2), func(engine.Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range h.Meta {
		found = found || kv == [2]string{metaVersion, "2"}
	}
	if !found {
		t.Fatalf("header %v lacks %s=2", h.Meta, metaVersion)
	}
}

// TestOpVersionsCoverEveryOpCode: every operation code the engine applies
// (probed through engine.Apply, whatever its row says) needs a cluster
// version this build supports, its row's; every other code needs one no
// version has, so the gate refuses it. A row without its version (since)
// fails here.
func TestOpVersionsCoverEveryOpCode(t *testing.T) {
	needs := opNeedsTable()
	known := 0
	for c := range engine.NumOps {
		code := engine.OpCode(c)
		switch v := needs[c]; {
		case probeKnown(code) != code.Known():
			t.Errorf("operation code %d: the engine applies it: %v; it has a row: %v", c, !code.Known(), code.Known())
		case code.Known() && (v < BaseVersion || v > SupportedVersion):
			t.Errorf("%v: version %d, outside %d..%d: give its row (engine/ops.go) the cluster version of the release that introduces it", code, v, BaseVersion, SupportedVersion)
		case !code.Known() && v != noVersion:
			t.Errorf("operation code %d, unknown to the engine, needs version %d", c, v)
		case code.Known():
			known++
		}
	}
	if known < 27 {
		t.Fatalf("only %d operations known", known)
	}
	// Every cluster version has the snapshot format it writes.
	for v := BaseVersion; v <= SupportedVersion; v++ {
		if f, ok := snapshotFormats[v]; !ok || f < 1 || f > persistence.Version {
			t.Errorf("cluster version %d: snapshot format %d, %v", v, f, ok)
		}
	}
	// Every entry type this build writes has its version too.
	for _, typ := range []byte{codec.EntryOps, codec.EntryLeader, codec.EntryBatch, codec.EntryVersion} {
		if v, ok := entryVersions[typ]; !ok || v > SupportedVersion {
			t.Errorf("entry type 0x%02x: version %d, %v", typ, v, ok)
		}
	}
}

// TestGateRefusesOpsAboveTheClusterVersion: an op the group's version does
// not have is answered with a clear error and never proposed; the other
// ops of the batch run.
func TestGateRefusesOpsAboveTheClusterVersion(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	waitFor(t, 5*time.Second, func() error {
		if v := n.fsm.clusterVersion(); v != SupportedVersion {
			return fmt.Errorf("a node alone runs version %d", v)
		}
		return nil
	})
	needs := opNeedsTable()
	needs[engine.OpRelease] = SupportedVersion + 1 // as if a later release had added it
	n.fsm.needs = needs
	applied := n.fsm.applied.Load()
	rs := exec(t, n, engine.Op{Code: engine.OpRelease, Key: []byte("c"), Token: []byte("t")})
	if e := errcode.Of(rs[0].Err); e == nil || e.Code != errcode.ClusterVersion || e.Num != int64(SupportedVersion)+1 || e.Detail != strconv.FormatUint(uint64(SupportedVersion), 10) {
		t.Fatalf("gated op: %v", rs[0].Err)
	}
	if got := n.fsm.applied.Load(); got != applied {
		t.Fatalf("a gated batch reached the log: applied %d -> %d", applied, got)
	}
	rs = exec(t, n, decide("a", tokenRule, 1), engine.Op{Code: engine.OpRelease, Key: []byte("c"), Token: []byte("t")}, decide("a", tokenRule, 1))
	if !rs[0].Allowed || !errcode.Is(rs[1].Err, errcode.ClusterVersion) || !rs[2].Allowed || rs[2].Remaining != tokenRule.Limit-2 {
		t.Fatalf("mixed batch: %+v", rs)
	}
}

// TestGateRefusesStrayFields: an op carrying a field its row in the
// engine's table of operations does not name (here INCRBY's increment in
// Cost, which the wire would drop for Delta) is refused before it is
// proposed; the other ops of the batch run.
func TestGateRefusesStrayFields(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	applied := n.fsm.applied.Load()
	rs := exec(t, n, engine.Op{Code: engine.OpIncrBy, Key: []byte("s"), Cost: 5})
	if e := errcode.Of(rs[0].Err); e == nil || e.Code != errcode.Internal || !strings.Contains(e.Detail, "OpIncrBy carries fields 0x2") {
		t.Fatalf("stray field: %v", rs[0].Err)
	}
	if got := n.fsm.applied.Load(); got != applied {
		t.Fatalf("a refused batch reached the log: applied %d -> %d", applied, got)
	}
	rs = exec(t, n, engine.Op{Code: engine.OpIncrBy, Key: []byte("s"), Delta: 5}, engine.Op{Code: engine.OpGet, Key: []byte("s"), Value: []byte("x")})
	if rs[0].Err != nil || rs[0].Count != 5 || !errcode.Is(rs[1].Err, errcode.Internal) {
		t.Fatalf("mixed batch: %+v", rs)
	}
}

// TestClusterVersionNeedsEveryMember: the leader raises the version only
// once every member says it supports it; a member that cannot answer (down
// here; a release before versions in the process test) holds it at 1.
func TestClusterVersionNeedsEveryMember(t *testing.T) {
	dirs := make([]string, 3)
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		dirs[i] = t.TempDir()
		c.InMemory = false
		c.DataDir = dirs[i]
		c.bootstrapVersion = BaseVersion // bootstrapped by v0.1.0, then upgraded
		if i == 2 {
			c.advertiseVersion = BaseVersion // a member that supports version 1 only
		}
	})
	time.Sleep(2 * versionPollPeriod) // the leader asks at once when ready, then every period
	for i, n := range tc.nodes {
		if v := n.fsm.clusterVersion(); v != BaseVersion {
			t.Fatalf("node %d: version %d while a member supports 1 only", i+1, v)
		}
	}
	// Readiness: a node whose group runs an older version than it
	// supports says so for versionSettle after its start, then serves the
	// mixed cluster anyway.
	for i, n := range tc.nodes[:2] {
		n.version.started = time.Now()
		if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "cluster version 1") {
			t.Fatalf("node %d ready at cluster version 1 right after its start: %v", i+1, err)
		}
		n.version.started = time.Now().Add(-versionSettle)
		if err := n.Ready(); err != nil {
			t.Fatalf("node %d not ready %s after its start in a mixed cluster: %v", i+1, versionSettle, err)
		}
	}
	tc.stop(2)
	tc.cfgs[2].advertiseVersion = 0
	tc.start(2)
	waitFor(t, 10*time.Second, func() error {
		for i, n := range tc.nodes {
			if v := n.fsm.clusterVersion(); v != SupportedVersion {
				return fmt.Errorf("node %d: version %d", i+1, v)
			}
		}
		return nil
	})
	for i, dir := range dirs {
		d, err := persistence.OpenDataDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := d.ClusterVersion(); err != nil || v != SupportedVersion {
			t.Fatalf("node %d's data dir records version %d, %v", i+1, v, err)
		}
		if err := d.CheckClusterVersion(SupportedVersion - 1); err == nil {
			t.Fatalf("node %d: a binary of version %d would start on it", i+1, SupportedVersion-1)
		}
		b, err := os.ReadFile(filepath.Join(dir, "raft-log"))
		if err != nil || !strings.Contains(string(b), "needs sluice "+releaseOf(SupportedVersion)+" or later") {
			t.Fatalf("node %d: raft-log %q (%v) does not turn away releases before versions", i+1, b, err)
		}
	}
}

// TestFollowerHaltsOnEntryItCannotApply: a follower whose build cannot
// apply an entry stops serving the group with a clear error (RAFT.STATUS's
// apply_error), while the others apply it and go on; it never skips it.
func TestFollowerHaltsOnEntryItCannotApply(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	f := (l + 1) % 3
	// The follower's build knows no OpRelease, as an older release would
	// not know an op added later.
	needs := opNeedsTable()
	needs[engine.OpRelease] = noVersion
	tc.nodes[f].fsm.needs = needs
	exec(t, tc.nodes[l], decide("a", tokenRule, 1))
	exec(t, tc.nodes[l], engine.Op{Code: engine.OpRelease, Key: []byte("c"), Token: []byte("t")})
	rs := exec(t, tc.nodes[l], decide("a", tokenRule, 1))
	if !rs[0].Allowed || rs[0].Remaining != tokenRule.Limit-2 {
		t.Fatalf("the leader after a follower halted: %+v", rs[0])
	}
	fn := tc.nodes[f]
	waitFor(t, 5*time.Second, func() error {
		if fn.applyError() == "" {
			return errors.New("the follower did not halt")
		}
		return nil
	})
	if !strings.Contains(fn.applyError(), "operation code 17 is unknown") {
		t.Fatalf("apply_error %q", fn.applyError())
	}
	status := map[string]string{}
	for _, kv := range fn.Status() {
		status[kv[0]] = kv[1]
	}
	if status["apply_error"] != fn.applyError() {
		t.Fatalf("RAFT.STATUS apply_error %q", status["apply_error"])
	}
	if applied, _ := strconv.ParseUint(status["applied_index"], 10, 64); applied != fn.fsm.halted().index-1 {
		t.Fatalf("RAFT.STATUS applied_index %s, want %d (the entry before the one it could not apply)", status["applied_index"], fn.fsm.halted().index-1)
	}
	err := fn.Execute(context.Background(), []engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1))
	if !errcode.Is(err, errcode.ApplyHalted) {
		t.Fatalf("a halted follower served: %v", err)
	}
	// Its state stopped before the entry: "a" was charged once there.
	if got := peekRemaining(tc.engines[f], tc.clock.now()+1, "a"); got != tokenRule.Limit-1 {
		t.Fatalf("halted follower: a remaining %d, want %d", got, tokenRule.Limit-1)
	}
	// The healthy replicas agree.
	o := 3 - l - f
	waitFor(t, 5*time.Second, func() error {
		if got := peekRemaining(tc.engines[o], tc.clock.now()+1, "a"); got != tokenRule.Limit-2 {
			return fmt.Errorf("node %d: a remaining %d", o+1, got)
		}
		return nil
	})
}

// TestHaltedLeaderHandsOver: a leader that cannot apply an entry hands
// its leadership to a member that can, and the group goes on.
func TestHaltedLeaderHandsOver(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	needs := opNeedsTable()
	needs[engine.OpRelease] = noVersion
	tc.nodes[l].fsm.needs = needs
	// Straight into the log, as a leader's gate would not let it in.
	data := opsEntry(tc.clock.now(), engine.Op{Code: engine.OpRelease, Key: []byte("c"), Token: []byte("t")})
	_ = tc.nodes[l].raft.Apply(data, time.Second).Error()
	waitFor(t, 10*time.Second, func() error {
		for i, n := range tc.nodes {
			if i != l && n.raft.State() == raft.Leader {
				if k := n.route().kind; k == routeLocal {
					return nil
				}
			}
		}
		return errors.New("no other node leads yet")
	})
	// Any healthy node serves; the halted one refuses.
	o := (l + 1) % 3
	rs := exec(t, tc.nodes[o], decide("a", tokenRule, 1))
	if !rs[0].Allowed {
		t.Fatalf("after the hand-over: %+v", rs[0])
	}
	err := tc.nodes[l].Execute(context.Background(), []engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1))
	if !errcode.Is(err, errcode.ApplyHalted) {
		t.Fatalf("the halted node served: %v", err)
	}
}

// TestCodeVersionsCoverEveryCode: every error code has the cluster version
// that introduced it, and a code newer than a follower's version crosses
// the forwarding wire as one it knows, of the same class.
func TestCodeVersionsCoverEveryCode(t *testing.T) {
	for c := range errcode.NumCodes {
		if v := codeVersion(c); v > SupportedVersion {
			t.Errorf("errcode %s (%d) has no row in codeVersions (cluster/version.go): give it the cluster version of the release that introduces it", c, c)
		}
	}
	for c, v := range codeVersions {
		if c <= errcode.Other || c >= errcode.NumCodes || v < 2 {
			t.Errorf("codeVersions row %d: version %d (codes up to Other are version 1's)", c, v)
		}
	}
	newer := &errcode.Error{Code: errcode.ClusterVersion, Num: 3, Detail: "2"}
	old := errorFor(newer, 1)
	if e := errcode.Of(old); e == nil || e.Code != errcode.Other || !strings.Contains(e.Detail, "cluster version too low") {
		t.Fatalf("for version 1: %v", old)
	}
	if got := errorFor(newer, 2); got != newer {
		t.Fatalf("for version 2: %v", got)
	}
	rs := []engine.Result{{Err: newer}, {Each: []engine.Result{{Err: newer}}}, {Err: engine.ErrWrongType}}
	errorsFor(rs, 1)
	if errcode.Of(rs[0].Err).Code != errcode.Other || errcode.Of(rs[1].Each[0].Err).Code != errcode.Other || rs[2].Err != engine.ErrWrongType {
		t.Fatalf("results for version 1: %+v", rs)
	}
	// Encoded for the wire, a version 1 follower decodes it.
	b := codec.AppendError(nil, old)
	d := codec.NewDecoder(b)
	if err := d.CodedError(sentinels); d.Err != nil || errcode.Of(err).Code != errcode.Other {
		t.Fatalf("decoded %v, %v", err, d.Err)
	}
}

// TestLeaderGatesForwardedOps: a follower of a newer release may forward
// an operation the leader's build does not know: the leader refuses it
// (not applied) instead of putting it into the log.
func TestLeaderGatesForwardedOps(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	waitFor(t, 10*time.Second, func() error {
		for i, n := range tc.nodes {
			if v := n.fsm.clusterVersion(); v != SupportedVersion {
				return fmt.Errorf("node %d: version %d", i+1, v)
			}
		}
		return nil
	})
	l := tc.leader()
	f := (l + 1) % 3
	needs := opNeedsTable()
	needs[engine.OpRelease] = noVersion // the leader's build lacks it
	tc.nodes[l].fsm.needs = needs
	applied := tc.nodes[l].fsm.applied.Load()
	err := tc.nodes[f].Execute(context.Background(), []engine.Op{{Code: engine.OpRelease, Key: []byte("c"), Token: []byte("t")}}, make([]engine.Result, 1))
	if e := errcode.Of(err); e == nil || e.Code != errcode.ClusterVersion {
		t.Fatalf("forwarded op the leader does not know: %v", err)
	}
	if got := tc.nodes[l].fsm.applied.Load(); got != applied {
		t.Fatalf("the refused op reached the log: applied %d -> %d", applied, got)
	}
	if tc.nodes[l].applyError() != "" {
		t.Fatalf("the leader halted: %s", tc.nodes[l].applyError())
	}
}

// TestNodeRefusesNewerDataDir: a data dir whose log reached a cluster
// version above this build's is refused before Raft starts, saying why.
func TestNodeRefusesNewerDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster-version"), []byte(strconv.Itoa(int(SupportedVersion)+1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ID: "n1", RESPAddr: "127.0.0.1:6001", RaftAddr: "127.0.0.1:0", ForwardAddr: "127.0.0.1:0",
		DataDir: dir, Logger: testLogger(t)}
	fastRaft(&cfg)
	h, err := NewHost(context.Background(), cfg, []*engine.Engine{engine.New(engine.Config{Stripes: 4})})
	if err == nil {
		h.Close(context.Background())
		t.Fatal("a node started on a data dir of a newer cluster version")
	}
	var ve *persistence.ClusterVersionError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), fmt.Sprintf("cluster version %d", SupportedVersion+1)) || !strings.Contains(err.Error(), fmt.Sprintf("supports cluster version %d at most", SupportedVersion)) {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft-wal")); err == nil {
		t.Fatal("the refused start opened a log store")
	}
}

// probeKnown reports whether the engine applies op code c: an engine
// answers a code it does not know with "unknown operation code".
func probeKnown(c engine.OpCode) (known bool) {
	defer func() {
		if recover() != nil {
			known = true // it did something with it
		}
	}()
	e := engine.New(engine.Config{Stripes: 1})
	res := make([]engine.Result, 1)
	e.Apply(1e18, []engine.Op{{Code: c, Key: []byte("k"), Rule: tokenRule, Cost: 1}}, res)
	return res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "unknown operation code")
}

// TestFieldsNeedTheirVersion: an op of an old code that uses a field of a
// later version (Args, DB) needs that version, since an older node cannot
// decode the field.
func TestFieldsNeedTheirVersion(t *testing.T) {
	needs := opNeedsTable()
	for _, tc := range []struct {
		op   engine.Op
		want uint32
	}{
		{engine.Op{Code: engine.OpDecide}, 1},
		{engine.Op{Code: engine.OpGet}, 2},
		{engine.Op{Code: engine.OpGet, DB: 1}, argsVersion},
		{engine.Op{Code: engine.OpDelete, Args: [][]byte{{}}}, argsVersion},
	} {
		if got := needs.need(&tc.op); got != tc.want {
			t.Errorf("op %+v needs version %d, want %d", tc.op, got, tc.want)
		}
		if needs.gated(argsVersion-1, []engine.Op{tc.op}) != (tc.want > argsVersion-1) {
			t.Errorf("op %+v: gated at version %d is wrong", tc.op, argsVersion-1)
		}
	}
}

// TestBootstrappedClusterStartsAtSupportedVersion: a group bootstrapped by
// this release runs its cluster version from the moment any node is ready:
// the gate lets the newest ops through on every node at once, and the
// version entry precedes the first leader's announcement in the log; only
// the first leader appends it.
func TestBootstrappedClusterStartsAtSupportedVersion(t *testing.T) {
	dirs := make([]string, 3)
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		dirs[i] = t.TempDir()
		c.InMemory = false
		c.DataDir = dirs[i]
	})
	incr := engine.Op{Code: engine.OpIncrBy, Key: []byte("k"), Delta: 1}
	for i, n := range tc.nodes {
		// Ready here (newTestCluster waited): no wait for a version poll.
		if v := n.fsm.clusterVersion(); v != SupportedVersion {
			t.Fatalf("node %d runs version %d when ready", i+1, v)
		}
		if rs := exec(t, n, incr); rs[0].Err != nil {
			t.Fatalf("node %d: INCRBY: %v", i+1, rs[0].Err)
		}
		d, err := persistence.OpenDataDir(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		if v, err := d.ClusterVersion(); err != nil || v != SupportedVersion {
			t.Fatalf("node %d's data dir records version %d, %v", i+1, v, err)
		}
	}
	// Only the first leader appends it: a restart finds it in the log.
	for i := range tc.nodes {
		tc.stop(i)
	}
	for i := range tc.nodes {
		tc.start(i)
	}
	tc.waitReady()
	l := tc.nodes[tc.leader()]
	versions := 0
	for idx := uint64(1); idx <= l.raft.LastIndex(); idx++ {
		var e raft.Log
		if err := l.stores.Logs.GetLog(idx, &e); err != nil || e.Type != raft.LogCommand || len(e.Data) == 0 {
			continue
		}
		if e.Data[0] == codec.EntryVersion {
			versions++
		}
	}
	if versions != 1 {
		t.Fatalf("%d version entries in the log, want the bootstrap's one", versions)
	}
}
