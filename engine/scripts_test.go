package engine

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// opsRunner is a ScriptRunner that applies its ops and aborts when told.
type opsRunner struct {
	ops   []Op
	abort bool
	got   []Result
}

func (r *opsRunner) RunScript(tx *ScriptTx) []byte {
	r.got = make([]Result, len(r.ops))
	tx.Apply(r.ops, r.got)
	if r.abort {
		tx.Abort()
	}
	return []byte("+OK\r\n")
}

// A script its runner aborts (a spent budget) changes nothing: every key
// it wrote, created, deleted, renamed or flushed is as it was; one that
// is not aborted keeps its writes.
func TestScriptAbortUndoesEverything(t *testing.T) {
	now := int64(1893456000) * 1e9
	bucket := Rule{Kind: KindToken, Limit: 5, Period: int64(time.Second)}
	for _, tc := range []struct {
		name string
		ops  []Op
	}{
		{"set and incr", []Op{{Code: OpSet, Key: []byte("s"), Value: []byte("new")}, {Code: OpIncrBy, Key: []byte("n"), Delta: 5}, {Code: OpIncrBy, Key: []byte("fresh"), Delta: 1}}},
		{"delete and decide", []Op{{Code: OpDelete, Key: []byte("s")}, {Code: OpDecide, Key: []byte("b"), Rule: bucket, Cost: 3}, {Code: OpDecide, Key: []byte("b2"), Rule: bucket, Cost: 1}}},
		{"expire and rename", []Op{{Code: OpExpire, Key: []byte("n"), Expire: 1, Flags: StrExpireRel}, {Code: OpRename, Key: []byte("s"), Args: [][]byte{[]byte("n")}}}},
		{"flushall", []Op{{Code: OpSet, Key: []byte("x"), Value: []byte("1")}, {Code: OpFlush}, {Code: OpSet, Key: []byte("y"), Value: []byte("2")}}},
	} {
		for _, abort := range []bool{true, false} {
			r := &opsRunner{ops: tc.ops, abort: abort}
			e := New(Config{Stripes: 8, Scripts: r})
			res := make([]Result, 4)
			e.Apply(now, []Op{
				{Code: OpSet, Key: []byte("s"), Value: []byte("old"), Expire: 100_000, Flags: StrExpireRel},
				{Code: OpIncrBy, Key: []byte("n"), Delta: 7},
				{Code: OpDecide, Key: []byte("b"), Rule: bucket, Cost: 1},
			}, res)
			e.Apply(now, []Op{{Code: OpEval, Value: []byte("script")}}, res[:1])
			if res[0].Err != nil {
				t.Fatalf("%s: %v", tc.name, res[0].Err)
			}
			// The script cache holds the script either way: compare the
			// keys with an engine that ran no script.
			e.Apply(now, []Op{{Code: OpScriptFlush}}, res[:1])
			after, keysAfter := e.Digest()
			e2 := New(Config{Stripes: 8, Scripts: &opsRunner{}})
			e2.Apply(now, []Op{
				{Code: OpSet, Key: []byte("s"), Value: []byte("old"), Expire: 100_000, Flags: StrExpireRel},
				{Code: OpIncrBy, Key: []byte("n"), Delta: 7},
				{Code: OpDecide, Key: []byte("b"), Rule: bucket, Cost: 1},
			}, res)
			before, keys := e2.Digest()
			if abort && (after != before || keysAfter != keys) {
				t.Errorf("%s: an aborted script changed the state (%d keys, %d before)", tc.name, keysAfter, keys)
			}
			if !abort && after == before {
				t.Errorf("%s: a script that ran to its end changed nothing", tc.name)
			}
		}
	}
}

// An EVALSHA of an unknown script is NOSCRIPT; the cache refuses a new
// script beyond its bounds and evicts none.
func TestScriptCacheBounds(t *testing.T) {
	e := New(Config{Stripes: 8, Scripts: &opsRunner{}, ScriptCacheMax: 2})
	res := make([]Result, 1)
	e.Apply(1, []Op{{Code: OpEvalSha, Value: []byte(strings.Repeat("a", 40))}}, res)
	if res[0].Err == nil || !strings.HasPrefix(res[0].Err.Error(), "no script") {
		t.Fatalf("EVALSHA of an unknown script: %v", res[0].Err)
	}
	for i, body := range []string{"a", "b", "c"} {
		e.Apply(1, []Op{{Code: OpScriptLoad, Value: []byte(body)}}, res)
		if full := res[0].Err != nil; full != (i == 2) {
			t.Fatalf("SCRIPT LOAD %d: %v", i, res[0].Err)
		}
	}
	e.Apply(1, []Op{{Code: OpScriptExists, Args: [][]byte{[]byte(ScriptSHA([]byte("a"))), []byte(ScriptSHA([]byte("c")))}}}, res)
	if string(res[0].Values[0]) != "1" || string(res[0].Values[1]) != "0" {
		t.Fatalf("SCRIPT EXISTS: %q", res[0].Values)
	}
}

// busyRunner applies a SET of its declared key "a", then an INCRBY of the
// undeclared key u; on its first run it frees the stripe the test holds,
// once its ops have met it.
type busyRunner struct {
	u     []byte
	held  *stripe
	runs  int
	first []Result
}

func (r *busyRunner) RunScript(tx *ScriptTx) []byte {
	r.runs++
	got := make([]Result, 2)
	tx.Apply([]Op{{Code: OpSet, Key: []byte("a"), Value: []byte("1")}, {Code: OpIncrBy, Key: r.u, Delta: 1}}, got)
	if r.runs == 1 {
		r.first = got
		if r.held != nil {
			r.held.mu.Unlock()
		}
	}
	return []byte("+OK\r\n")
}

// A script holds only its declared keys' stripes; an undeclared key in a
// stripe held elsewhere has the run undone and rerun holding every stripe,
// so its ops apply once; with the stripe free, the script runs once.
func TestScriptUndeclaredKeyStripeBusy(t *testing.T) {
	now := int64(1893456000) * 1e9
	for _, busy := range []bool{true, false} {
		r := &busyRunner{}
		e := New(Config{Stripes: 8, Scripts: r})
		ia := xxhash.Sum64([]byte("a")) & e.mask
		for i := 0; ; i++ {
			r.u = []byte("u" + strconv.Itoa(i))
			if xxhash.Sum64(r.u)&e.mask != ia {
				break
			}
		}
		if busy {
			r.held = e.stripes[xxhash.Sum64(r.u)&e.mask]
			r.held.mu.Lock()
		}
		res := make([]Result, 1)
		e.Apply(now, []Op{{Code: OpEval, Value: []byte("script"), NumKeys: 1, Key: []byte("a"), Args: [][]byte{[]byte("a")}}}, res)
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		wantRuns := map[bool]int{true: 2, false: 1}[busy]
		if r.runs != wantRuns || busy != (r.first[1].Err != nil) {
			t.Fatalf("busy %v: %d runs, first run's INCRBY %v", busy, r.runs, r.first[1].Err)
		}
		got := make([]Result, 2)
		e.Apply(now, []Op{{Code: OpGet, Key: []byte("a")}, {Code: OpGet, Key: r.u}}, got)
		if string(got[0].Value) != "1" || string(got[1].Value) != "1" {
			t.Fatalf("busy %v: a=%q %s=%q, want 1 and 1 (applied once)", busy, got[0].Value, r.u, got[1].Value)
		}
		for i, s := range e.stripes {
			if !s.mu.TryLock() {
				t.Fatalf("busy %v: stripe %d still held after the script", busy, i)
			}
			s.mu.Unlock()
		}
	}
}

// A script's before-images live in a buffer its tx reuses from run to run
// (exportKeyTo): each aborted run restores the values and TTLs its own
// keys had, whatever the runs before it saved.
func TestScriptAbortRestoresAcrossRuns(t *testing.T) {
	now := int64(1893456000) * 1e9
	r := &opsRunner{abort: true}
	e := New(Config{Stripes: 8, Scripts: r})
	res := make([]Result, 3)
	for run := range 5 {
		old := strings.Repeat(strconv.Itoa(run), 10*(5-run)+1) // shorter each run
		e.Apply(now, []Op{
			{Code: OpSet, Key: []byte("s"), Value: []byte(old), Expire: 100_000, Flags: StrExpireRel},
			{Code: OpSet, Key: []byte("k" + strconv.Itoa(run)), Value: []byte(old + "-k")},
		}, res[:2])
		r.ops = []Op{
			{Code: OpSet, Key: []byte("k" + strconv.Itoa(run)), Value: []byte("overwritten")},
			{Code: OpSet, Key: []byte("s"), Value: []byte(strings.Repeat("x", 300))},
			{Code: OpDelete, Key: []byte("k" + strconv.Itoa(run))},
		}
		e.Apply(now, []Op{{Code: OpEval, Value: []byte("script")}}, res[:1])
		if res[0].Err != nil {
			t.Fatalf("run %d: %v", run, res[0].Err)
		}
		e.Apply(now, []Op{
			{Code: OpGet, Key: []byte("s")},
			{Code: OpGet, Key: []byte("k" + strconv.Itoa(run))},
			{Code: OpTTL, Key: []byte("s")},
		}, res)
		if string(res[0].Value) != old || string(res[1].Value) != old+"-k" {
			t.Fatalf("run %d: after an aborted script s=%q k=%q, want %q and %q", run, res[0].Value, res[1].Value, old, old+"-k")
		}
		if res[2].TTL <= 0 {
			t.Fatalf("run %d: s lost its TTL (%d)", run, res[2].TTL)
		}
	}
}
