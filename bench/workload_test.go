package bench

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

func TestSluiceTemplates(t *testing.T) {
	for _, c := range []struct {
		a    Algorithm
		p    Params
		want []string
	}{
		{AlgToken, Params{Limit: 100, RateN: 10, Period: time.Second, Cost: 1}, []string{"RL.TOKEN", "k", "100", "10/1000ms"}},
		{AlgLeaky, Params{Limit: 5, RateN: 1, Period: time.Hour, Cost: 3}, []string{"RL.LEAKY", "k", "5", "1/3600000ms", "COST", "3"}},
		{AlgFixed, Params{Limit: 7, Period: time.Minute, Cost: 1}, []string{"RL.FIXED", "k", "7", "60000ms"}},
		{AlgSliding, Params{Limit: 7, Period: time.Minute, Cost: 1}, []string{"RL.SLIDING", "k", "7", "60000ms"}},
		{AlgLog, Params{Limit: 2, Period: 1500 * time.Millisecond, Cost: 2}, []string{"RL.LOG", "k", "2", "1500ms", "COST", "2"}},
	} {
		tpl, err := SluiceDialect.Template(c.a, c.p)
		if err != nil {
			t.Fatal(err)
		}
		got := string(tpl.Append(nil, []byte("k")))
		if want := string(respwire.AppendCommand(nil, c.want...)); got != want {
			t.Errorf("%s: %q, want %q", c.a, got, want)
		}
	}
}

func TestLuaTemplates(t *testing.T) {
	tpl, err := LuaDialect.Template(AlgToken, Params{Limit: 100, RateN: 10, Period: time.Second, Cost: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := string(tpl.Append(nil, []byte("k")))
	want := string(respwire.AppendCommand(nil, "EVALSHA", ScriptSHA("token_bucket.lua"), "1", "k", "100", "10", "2"))
	if got != want {
		t.Errorf("token: %q, want %q", got, want)
	}
	tpl, err = LuaDialect.Template(AlgLog, Params{Limit: 3, Period: time.Minute, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	want = string(respwire.AppendCommand(nil, "EVALSHA", ScriptSHA("sliding_log.lua"), "1", "k", "3", "60000", "1"))
	if got := string(tpl.Append(nil, []byte("k"))); got != want {
		t.Errorf("log: %q, want %q", got, want)
	}
	tpl, err = AnchorDialect.Template(AlgToken, Params{Limit: 4, RateN: 4, Period: time.Minute, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	want = string(respwire.AppendCommand(nil, "EVALSHA", ScriptSHA(AnchorScript), "1", "k", "4", "0.06666666666666667"))
	if got := string(tpl.Append(nil, []byte("k"))); got != want {
		t.Errorf("anchor: %q, want %q", got, want)
	}
	if _, err := AnchorDialect.Template(AlgLog, Params{Limit: 1, Period: time.Second, Cost: 1}); err == nil {
		t.Error("the anchor accepted a log workload")
	}
	if _, err := AnchorDialect.Template(AlgToken, Params{Limit: 1, RateN: 1, Period: time.Second, Cost: 2}); err == nil {
		t.Error("the anchor accepted a cost")
	}
}

func TestWorkloadValidate(t *testing.T) {
	w := Workload{Alg: AlgToken, Keys: 10, Dist: DistUniform, Cost: 1}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if w.Prefix != "b:token:" || w.Allow.Limit == 0 || w.Deny.Limit != 1 || w.AllowPrefix() != "b:token:" {
		t.Errorf("defaults not filled: %+v", w)
	}
	w.DenyShare = 0.5
	if w.AllowPrefix() != "b:token:a:" || w.DenyPrefix() != "b:token:d:" {
		t.Errorf("prefixes %q %q", w.AllowPrefix(), w.DenyPrefix())
	}
	bad := Workload{Alg: "nope", Keys: 0, Dist: "x", Cost: 0, DenyShare: 2}
	err := bad.Validate()
	if err == nil {
		t.Fatal("a bad workload validated")
	}
	for _, s := range []string{"unknown workload", "distribution", "keys", "deny share", "cost"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// TestRunLoadCountsEveryRequest drives a fake server that allows keys
// under "a:" and denies those under "d:", in request-count mode, and checks
// that every request is counted once and the denied share is what was asked.
func TestRunLoadCountsEveryRequest(t *testing.T) {
	var denyHits atomic.Int64
	s := startFake(t, func(args []string) string {
		if len(args) < 2 || args[0] != "RL.FIXED" {
			return "-ERR unexpected\r\n"
		}
		if strings.HasPrefix(args[1], "t:d:") {
			denyHits.Add(1)
			return "*5\r\n:0\r\n:1\r\n:0\r\n:100\r\n:100\r\n"
		}
		return "*5\r\n:1\r\n:9\r\n:8\r\n:0\r\n:100\r\n"
	})
	w := Workload{Alg: AlgFixed, Keys: 50, Dist: DistZipf, Cost: 1, DenyShare: 0.25, Prefix: "t:"}
	const total = 4000
	res, err := RunLoad(testCtx(t), w, SluiceDialect, LoadOptions{
		Addrs: []string{s.addr()}, Conns: 1, Pipeline: 7, Requests: total, Seed: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != total || res.Allowed+res.Denied != total || res.Errors != 0 {
		t.Fatalf("requests %d allowed %d denied %d errors %d, want %d in all", res.Requests, res.Allowed, res.Denied, res.Errors, total)
	}
	if len(res.Samples) != total {
		t.Errorf("%d latencies recorded, want %d", len(res.Samples), total)
	}
	if d := res.DenyShare(); d < 0.2 || d > 0.3 {
		t.Errorf("denied share %.3f, want about 0.25", d)
	}
	// the 50 deny keys were used up first, outside the measured requests
	if got := denyHits.Load() - res.Denied; got != 50 {
		t.Errorf("%d requests to deny keys before the run, want 50", got)
	}
	if res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 || res.Throughput <= 0 {
		t.Errorf("latency %+v throughput %g", res.Latency, res.Throughput)
	}
}

func TestRunLoadReportsErrorReplies(t *testing.T) {
	s := startFake(t, func(args []string) string { return "-CLUSTERDOWN no leader\r\n" })
	res, err := RunLoad(testCtx(t), Workload{Alg: AlgToken, Keys: 5, Dist: DistUniform, Cost: 1}, SluiceDialect,
		LoadOptions{Addrs: []string{s.addr()}, Conns: 2, Pipeline: 4, Requests: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 100 || res.FirstError != "CLUSTERDOWN no leader" {
		t.Errorf("errors %d first %q", res.Errors, res.FirstError)
	}
}

func TestRunLoadFailsWhenServerIsGone(t *testing.T) {
	s := startFake(t, func(args []string) string { return ":1\r\n" })
	addr := s.addr()
	s.ln.Close()
	_, err := RunLoad(testCtx(t), Workload{Alg: AlgToken, Keys: 5, Dist: DistUniform, Cost: 1}, SluiceDialect,
		LoadOptions{Addrs: []string{addr}, Conns: 2, Pipeline: 1, Requests: 10})
	if err == nil {
		t.Fatal("RunLoad against a closed port succeeded")
	}
}

func TestPopulate(t *testing.T) {
	s := startFake(t, func(args []string) string { return "*5\r\n:1\r\n:1\r\n:0\r\n:0\r\n:1\r\n" })
	tpl, _ := SluiceDialect.Template(AlgToken, MemoryParams())
	if err := Populate(testCtx(t), []string{s.addr()}, tpl, "p:", 10, 1010, 3); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range s.commands() {
		seen[c[1]] = true
	}
	if n := len(s.commands()); n != 1000 || len(seen) != 1000 || !seen["p:000000000010"] || !seen["p:000000001009"] || seen["p:000000001010"] {
		t.Errorf("populated %d distinct keys in %d requests, want each of 1000 once", len(seen), n)
	}
	bad := startFake(t, func(args []string) string { return "-ERR nope\r\n" })
	if err := Populate(testCtx(t), []string{bad.addr()}, tpl, "p:", 0, 10, 2); err == nil {
		t.Error("Populate ignored error replies")
	}
}

func TestCaseMediansAndRatios(t *testing.T) {
	cr := CaseResult{Case: Case{Baseline: "b"}, Runs: []TargetRun{
		{Target: "a", Rounds: []LoadResult{{Throughput: 300}, {Throughput: 100}, {Throughput: 200}}},
		{Target: "b", Rounds: []LoadResult{{Throughput: 50}, {Throughput: 100}}},
		{Target: "c", Unavailable: "no binary"},
	}}
	for i := range cr.Runs {
		if len(cr.Runs[i].Rounds) > 0 {
			cr.Runs[i].Median = MedianResult(cr.Runs[i].Rounds)
		}
	}
	if got := cr.Ratio("a"); got != 200/75.0 {
		t.Errorf("ratio %g", got)
	}
	if got := cr.Ratio("c"); got != 0 {
		t.Errorf("ratio of an unavailable target %g", got)
	}
	if cr.Run("zz") != nil {
		t.Error("Run of an unknown target")
	}
}

// TestAllTemplate checks the bytes of the all3 workload's requests: one
// RL.ALL of three token buckets on the picked user, its tenant and its
// shared key, for the allowed and the denied twin, as the load generator
// and Populate build them.
func TestAllTemplate(t *testing.T) {
	w := Workload{Alg: AlgAll3, Keys: 1_000_000, Dist: DistUniform, Cost: 2, DenyShare: 0.1}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	allow, err := SluiceDialect.Template(w.Alg, w.Allow)
	if err != nil {
		t.Fatal(err)
	}
	deny, err := SluiceDialect.Template(w.Alg, w.Deny)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tpl    Template
		prefix string
		i      uint64
		want   []string
	}{
		{allow, w.AllowPrefix(), 1234567, []string{"RL.ALL", "3",
			"TOKEN", "b:all3:a:000001234567", "1099511627776", "1/60000ms", "2",
			"TOKEN", "b:all3:a:t:000000012345", "1099511627776", "1/60000ms", "2",
			"TOKEN", "b:all3:a:g:000000000123", "1099511627776", "1/60000ms", "2"}},
		{deny, w.DenyPrefix(), 99, []string{"RL.ALL", "3",
			"TOKEN", "b:all3:d:000000000099", "2", "1/3600000ms", "2",
			"TOKEN", "b:all3:d:t:000000000000", "1099511627776", "1/60000ms", "2",
			"TOKEN", "b:all3:d:g:000000000000", "1099511627776", "1/60000ms", "2"}},
		// an index wider than KeyDigits keeps all its digits
		{allow, "p:", 1234567890123, []string{"RL.ALL", "3",
			"TOKEN", "p:1234567890123", "1099511627776", "1/60000ms", "2",
			"TOKEN", "p:t:012345678901", "1099511627776", "1/60000ms", "2",
			"TOKEN", "p:g:000123456789", "1099511627776", "1/60000ms", "2"}},
	} {
		got := string(c.tpl.AppendIndex(nil, c.prefix, c.i))
		if want := string(respwire.AppendCommand(nil, c.want...)); got != want {
			t.Errorf("%s%d:\n got %q\nwant %q", c.prefix, c.i, got, want)
		}
	}
	buf := make([]byte, 0, 512)
	if allocs := testing.AllocsPerRun(100, func() {
		buf = allow.AppendIndex(buf[:0], "b:all3:a:", 42)
	}); allocs != 0 {
		t.Errorf("AppendIndex allocates: %g allocs per request", allocs)
	}
	if _, err := LuaDialect.Template(AlgAll3, w.Allow); err == nil {
		t.Error("the Lua dialect accepted the all3 workload")
	}
	if a, err := ParseAlgorithm("all3"); err != nil || a.Command() != "RL.ALL" {
		t.Errorf("ParseAlgorithm(all3) = %q, %v", a, err)
	}
}

// TestSingleKeyTemplatesAppendIndex checks that AppendIndex of a template
// without layers is Append of AppendKey's key.
func TestSingleKeyTemplatesAppendIndex(t *testing.T) {
	tpl, err := SluiceDialect.Template(AlgToken, AllowParams(AlgToken, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint64{0, 7, 123456789012, 1 << 62} {
		want := string(tpl.Append(nil, AppendKey(nil, "x:", i)))
		if got := string(tpl.AppendIndex(nil, "x:", i)); got != want {
			t.Errorf("%d: %q, want %q", i, got, want)
		}
	}
}

// Append appends the request for key to b (the tests spell keys
// themselves; the load builds requests with AppendIndex); a layered template's layers
// need the key's index, see AppendIndex.
func (t Template) Append(b, key []byte) []byte {
	return append(respwire.AppendBulk(append(b, t.Head...), key), t.Tail...)
}
