package resp

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// TestRuleCache checks that RL.ALL's per-connection rule cache answers
// exactly what parsing answers, whatever came before: the same bytes under
// another kind, bytes that differ only in where the two parameters split,
// more distinct rules than it holds, invalid arguments, RL.LOG's rules
// (bounded by max-log-limit, never cached) and arguments too long to keep.
func TestRuleCache(t *testing.T) {
	s := NewServer(Config{MaxLogLimit: 50}, nil)
	long := strings.Repeat("9", 30)
	seq := []struct {
		kind string
		a, b string
	}{
		{"token", "10", "1/s"}, {"token", "10", "1/s"}, {"leaky", "10", "1/s"},
		{"fixed", "10", "1s"}, {"sliding", "10", "1s"}, {"fixed", "10", "1s"},
		{"token", "100", "/1s"}, {"token", "10", "0/1s"}, {"token", "1", "00/1s"},
		{"token", "10", "2/s"}, {"token", "1", "11/s"}, {"token", "11", "1/s"},
		{"token", "x", "1/s"}, {"token", "x", "1/s"}, {"token", "0", "1/s"},
		{"log", "50", "1s"}, {"log", "51", "1s"}, {"log", "51", "1s"},
		{"fixed", long, "1s"}, {"fixed", long, "1s"}, {"fixed", "1", long + "ms"},
		{"token", "10", "1/s"}, {"leaky", "10", "1/s"}, {"sliding", "10", "1s"},
	}
	var rc ruleCache
	for i, st := range seq {
		kind := allAlgorithm([]byte(st.kind))
		// Twice: a miss, then what the cache now holds.
		for range 2 {
			want, werr := s.parseRule(kind, []byte(st.a), []byte(st.b))
			got, gerr := rc.parse(s, kind, []byte(st.a), []byte(st.b))
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Errorf("%d: %s %q %q: %+v %v, want %+v %v", i, st.kind, st.a, st.b, got, gerr, want, werr)
			}
		}
	}
}

// TestRenderAll: RL.ALL's reply, whose per-limit integers copy the
// combined ones' renderings where equal, is byte for byte the plain
// rendering of every integer, on random results whose values often repeat
// across places and limits (small, large, negative, in both protocols).
func TestRenderAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := []int64{0, 1, 9, 10, 11, -1, 100, 1 << 40, 1<<40 - 1, 60000, 59999, math.MaxInt64, math.MinInt64}
	val := func() int64 {
		if rng.IntN(4) == 0 {
			return rng.Int64N(1 << 20)
		}
		return pool[rng.IntN(len(pool))]
	}
	five := func() engine.Result {
		return engine.Result{Allowed: rng.IntN(2) == 0, Limit: val(), Remaining: val(), RetryAfter: val(), ResetAfter: val()}
	}
	plain := func(r *replyBuf, res *engine.Result) {
		allowed := int64(0)
		if res.Allowed {
			allowed = 1
		}
		for _, v := range []int64{allowed, res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter} {
			r.b = append(r.b, ':')
			r.b = strconv.AppendInt(r.b, v, 10)
			r.b = append(r.b, '\r', '\n')
		}
	}
	for round := range 2000 {
		res := five()
		res.Each = make([]engine.Result, 1+rng.IntN(4))
		for i := range res.Each {
			res.Each[i] = five()
			if rng.IntN(2) == 0 { // the combined values come from the limits
				res.Each[i].Limit, res.Each[i].Remaining = res.Limit, res.Remaining
			}
			if rng.IntN(2) == 0 {
				res.Each[i].ResetAfter, res.Each[i].RetryAfter = res.ResetAfter, res.RetryAfter
			}
		}
		got := replyBuf{proto: 2 + round%2, b: []byte("prefix")}
		renderAll(nil, &got, nil, []engine.Result{res})
		want := replyBuf{proto: got.proto, b: []byte("prefix")}
		want.Array(5 + len(res.Each))
		plain(&want, &res)
		for i := range res.Each {
			want.Array(5)
			plain(&want, &res.Each[i])
		}
		if !bytes.Equal(got.b, want.b) {
			t.Fatalf("round %d: %+v\ngot  %q\nwant %q", round, res, got.b, want.b)
		}
	}
}

// TestAllAlgorithmsFromTable: RL.ALL's algorithms are the layerable kinds
// of the engine's table of kinds, and its COMMAND DOCS argument and its
// error text list those same kinds.
func TestAllAlgorithmsFromTable(t *testing.T) {
	var names, tokens []string
	for k := engine.KindNone + 1; k < engine.NumKinds; k++ {
		if !k.Layerable() {
			if got := allAlgorithm([]byte(k.String())); got != engine.KindNone {
				t.Errorf("RL.ALL takes %q, a kind that cannot be layered", k)
			}
			continue
		}
		names = append(names, k.String())
		tokens = append(tokens, strings.ToUpper(k.String()))
		for _, n := range []string{k.String(), strings.ToUpper(k.String())} {
			if got := allAlgorithm([]byte(n)); got != k {
				t.Errorf("allAlgorithm(%q) = %v, want %v", n, got, k)
			}
		}
	}
	want := "must be " + strings.Join(tokens[:len(tokens)-1], ", ") + " or " + tokens[len(tokens)-1]
	if allAlgorithmsText != want {
		t.Errorf("allAlgorithmsText = %q, want %q", allAlgorithmsText, want)
	}
	var docs []string
	for _, a := range rlAllCommand().args[1].subargs[0].subargs {
		docs = append(docs, a.name)
		if a.token != strings.ToUpper(a.name) {
			t.Errorf("RL.ALL's algorithm %q has token %q", a.name, a.token)
		}
	}
	if fmt.Sprint(docs) != fmt.Sprint(names) {
		t.Errorf("RL.ALL's documented algorithms are %v, the layerable kinds %v", docs, names)
	}
}
