package cluster

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/script"
)

// testRunner is an engine.ScriptRunner over internal/script whose
// redis.call knows a few string commands (resp's runner, which the
// cluster cannot import, calls the whole command table): enough to see a
// script replayed on every replica.
type testRunner struct{ rt *script.Runtime }

func newTestRunner() *testRunner {
	return &testRunner{rt: script.New(script.Config{MaxSteps: 20000, MaxMemory: 256 << 10}, script.Texts{
		Compile: "ERR compile: ", Steps: "ERR steps budget", Memory: "ERR memory budget", Nesting: "ERR nesting",
		NoArgs: "ERR no args", BadArg: "ERR bad arg", ReadOnly: "read-only", NoGlobal: "no global '%s'",
		WrongArgs: "ERR wrong args", BadResp: "ERR resp", Format: "bad format"})}
}

func (r *testRunner) RunScript(tx *engine.ScriptTx) []byte {
	n := tx.NumKeys()
	out, o := r.rt.Run(tx.SHA(), tx.Body(), tx.Args()[:n], tx.Args()[n:], 2, testHost{tx})
	if o == script.OutOfSteps || o == script.OutOfMemory {
		tx.Abort()
	}
	return out
}

type testHost struct{ tx *engine.ScriptTx }

func (h testHost) Call(args [][]byte, resp int) []byte {
	var op engine.Op
	switch strings.ToLower(string(args[0])) {
	case "incrby":
		d, _ := strconv.ParseInt(string(args[2]), 10, 64)
		op = engine.Op{Code: engine.OpIncrBy, Key: args[1], Delta: d}
	case "set":
		op = engine.Op{Code: engine.OpSet, Key: args[1], Value: args[2]}
	case "get":
		op = engine.Op{Code: engine.OpGet, Key: args[1]}
	case "time":
		op = engine.Op{Code: engine.OpTime}
	default:
		return []byte("-ERR unknown command\r\n")
	}
	res := make([]engine.Result, 1)
	h.tx.Apply([]engine.Op{op}, res)
	r := res[0]
	switch {
	case r.Err != nil:
		return []byte("-ERR " + r.Err.Error() + "\r\n")
	case op.Code == engine.OpIncrBy:
		return []byte(":" + strconv.FormatInt(r.Count, 10) + "\r\n")
	case op.Code == engine.OpTime:
		return []byte(fmt.Sprintf("*2\r\n:%d\r\n:%d\r\n", r.Time/1e9, r.Time/1e3%1e6))
	case op.Code == engine.OpGet && r.Kind != engine.KindString:
		return []byte("$-1\r\n")
	case op.Code == engine.OpGet:
		return []byte(fmt.Sprintf("$%d\r\n%s\r\n", len(r.Value), r.Value))
	}
	return []byte("+OK\r\n")
}

func eval(body string, keys []string, args ...string) engine.Op {
	op := engine.Op{Code: engine.OpEval, Value: []byte(body), NumKeys: int64(len(keys))}
	for _, k := range keys {
		op.Args = append(op.Args, []byte(k))
	}
	for _, a := range args {
		op.Args = append(op.Args, []byte(a))
	}
	if len(keys) > 0 {
		op.Key = op.Args[0]
	}
	return op
}

// Random scripts, budget-stopped ones among them, give every replica the
// same state and the same digest, and each script's reply on the leader
// is what a lone engine replies for the same sequence (the model).
func TestScriptsReplicatedDeterministically(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	waitFor(t, 10*time.Second, func() error { // scripts need version 3
		if v := tc.nodes[l].fsm.clusterVersion(); v != SupportedVersion {
			return fmt.Errorf("the group runs version %d", v)
		}
		return nil
	})
	model := engine.New(engine.Config{Stripes: 16, Scripts: newTestRunner()})
	scripts := []string{
		"return redis.call('incrby', KEYS[1], math.random(100))",
		"local t = redis.call('time') redis.call('set', KEYS[1], t[1] .. '.' .. t[2]) return t",
		"redis.call('set', KEYS[1], tostring(math.random())) return redis.call('get', KEYS[1])",
		"redis.call('incrby', KEYS[1], 1) while true do end",                          // steps: undone
		"redis.call('incrby', KEYS[1], 1) local s = 'x' while true do s = s .. s end", // memory: undone
		"redis.call('incrby', KEYS[1], 1) local function f() return f() + 1 end f()",  // recursion: undone
		"redis.call('incrby', KEYS[1], 1) local t = {} while true do t[#t+1] = 1 end", // a growing table: undone
		"redis.call('incrby', KEYS[1], 1) return string.rep('x', 1e9)",                // memory: undone
		"redis.call('incrby', KEYS[1], 5) error('boom')",                              // kept
		"local t = {} for i = 1, 10 do t[i] = math.random(1000) end return cjson.encode(t)",
	}
	r := rand.New(rand.NewPCG(1, 2))
	stamp := int64(1893456000) * 1e9
	for i := 0; i < 60; i++ {
		j := r.IntN(len(scripts))
		body := scripts[j]
		prefix := "s" // the incrementing scripts share their keys, the others have their own
		if strings.Contains(body, "incrby") {
			prefix = "k"
		} else {
			prefix += strconv.Itoa(j)
		}
		op := eval(body, []string{fmt.Sprintf("%s:%d", prefix, r.IntN(3))})
		tc.clock.advance(time.Millisecond)
		got := exec(t, tc.nodes[l], op)[0]
		want := make([]engine.Result, 1)
		model.Apply(stamp, []engine.Op{op}, want)
		stamp += int64(time.Millisecond)
		if got.Err != nil || want[0].Err != nil {
			t.Fatalf("%q: %v / %v", body, got.Err, want[0].Err)
		}
		if strings.Contains(body, "time") {
			continue // the model's clock is not the cluster's
		}
		if !bytes.Equal(got.Value, want[0].Value) {
			t.Fatalf("%q: leader replied %q, a lone engine %q", body, got.Value, want[0].Value)
		}
		if strings.Contains(body, "while true") || strings.Contains(body, "f() + 1") || strings.Contains(body, "1e9") {
			if !strings.Contains(string(got.Value), "budget") {
				t.Fatalf("%q: %q, want the budget error", body, got.Value)
			}
		}
	}
	// The group serves at once after the budget errors, and EVALSHA finds
	// the cached scripts on every replica.
	sha := engine.ScriptSHA([]byte(scripts[0]))
	res := exec(t, tc.nodes[l], engine.Op{Code: engine.OpEvalSha, Value: []byte(sha), NumKeys: 1, Args: [][]byte{[]byte("k:0")}, Key: []byte("k:0")})
	if res[0].Err != nil || !bytes.HasPrefix(res[0].Value, []byte(":")) {
		t.Fatalf("EVALSHA after the run: %+v %q", res[0].Err, res[0].Value)
	}
	tc.waitConverged(l)
	// Entries of the cluster's own (leader announcements) may still be
	// applying: the digests agree once every replica is at one index.
	waitFor(t, 10*time.Second, func() error {
		tc.waitConverged(l)
		d0, _ := tc.engines[l].Digest()
		for i := range tc.nodes {
			if d, _ := tc.engines[i].Digest(); d != d0 {
				return fmt.Errorf("node %d's digest differs from the leader's", i+1)
			}
			if n, _ := tc.engines[i].ScriptStats(); n == 0 {
				t.Fatalf("node %d caches no script", i+1)
			}
		}
		return nil
	})
}

// The script cache travels in snapshots: a replica restored from one runs
// EVALSHA, and SCRIPT FLUSH empties every replica.
func TestScriptCacheInSnapshots(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4, Scripts: newTestRunner()})
	f := newFSM(eng, testLogger(t), nil)
	big := "return '" + strings.Repeat("x", 200<<10) + "'" // more than one meta chunk
	stamp := int64(1e18)
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: opsEntry(stamp, engine.Op{Code: engine.OpScriptLoad, Value: []byte(big)})})
	f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: opsEntry(stamp, eval("return 7", nil))})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	eng2 := engine.New(engine.Config{Stripes: 4, Scripts: newTestRunner()})
	f2 := newFSM(eng2, testLogger(t), nil)
	if err := f2.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	d1, _ := eng.Digest()
	d2, _ := eng2.Digest()
	if d1 != d2 {
		t.Fatal("the restored replica's digest differs")
	}
	for _, body := range []string{big, "return 7"} {
		res := make([]engine.Result, 1)
		eng2.Apply(stamp, []engine.Op{{Code: engine.OpEvalSha, Value: []byte(engine.ScriptSHA([]byte(body)))}}, res)
		if res[0].Err != nil || len(res[0].Value) == 0 {
			t.Fatalf("EVALSHA on the restored replica: %v", res[0].Err)
		}
	}
	// A restore replaces the cache: an empty snapshot leaves none.
	if err := f.Restore(io.NopCloser(bytes.NewReader(emptySnapshot(t)))); err != nil {
		t.Fatal(err)
	}
	if n, _ := eng.ScriptStats(); n != 0 {
		t.Fatalf("%d scripts after restoring a snapshot without any", n)
	}
}

func emptySnapshot(t *testing.T) []byte {
	f := newFSM(engine.New(engine.Config{Stripes: 4}), testLogger(t), nil)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}
