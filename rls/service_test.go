package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/rls/rules"
)

// memExec runs ops on an engine at a time the test sets.
type memExec struct {
	e   *engine.Engine
	now int64
}

func (m *memExec) Execute(_ context.Context, ops []engine.Op, results []engine.Result) error {
	m.e.Apply(m.now, ops, results)
	return nil
}

// t0 is 10 minutes into an hour (and a day), so no window of a minute or
// longer ends during a test.
var t0 = func() int64 {
	t := time.Date(2026, 11, 27, 7, 10, 0, 0, time.UTC).UnixNano()
	return t
}()

func newService(t *testing.T, dir string, shadow bool) (*Service, *memExec) {
	t.Helper()
	s, err := New(Config{Dir: dir, Shadow: shadow, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s, &memExec{e: engine.New(engine.Config{Stripes: 8}), now: t0}
}

func d(pairs ...string) Descriptor {
	var es []rules.Entry
	for i := 0; i+1 < len(pairs); i += 2 {
		es = append(es, rules.Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return Descriptor{Entries: es}
}

func withHits(x Descriptor, n uint64) Descriptor { x.HasHits, x.Hits = true, n; return x }

// want is one descriptor's expected status: code, remaining, and the limit
// (0 for none).
type want struct {
	code   Code
	remain uint32
	rpu    uint32
}

type step struct {
	req     Request
	overall Code
	st      []want
}

func req(domain string, ds ...Descriptor) Request { return Request{Domain: domain, Descriptors: ds} }

func TestDecide(t *testing.T) {
	ok, over := CodeOK, CodeOverLimit
	tests := []struct {
		name   string
		shadow bool
		steps  []step
	}{
		{"counts down then denies", false, []step{
			{req("api", d("path", "/login")), ok, []want{{ok, 4, 5}}},
			{req("api", d("path", "/login")), ok, []want{{ok, 3, 5}}},
			{req("api", withHits(d("path", "/login"), 3)), ok, []want{{ok, 0, 5}}},
			{req("api", d("path", "/login")), over, []want{{over, 0, 5}}},
		}},
		{"all or nothing", false, []step{
			{req("api", withHits(d("path", "/login"), 5)), ok, []want{{ok, 0, 5}}},
			// login is full: remote_address is not charged.
			{req("api", d("remote_address", "1.2.3.4"), d("path", "/login")), over, []want{{ok, 10, 10}, {over, 0, 5}}},
			{req("api", d("remote_address", "1.2.3.4")), ok, []want{{ok, 9, 10}}},
		}},
		{"request hits_addend, descriptor peek", false, []step{
			{Request{Domain: "api", Hits: 4, Descriptors: []Descriptor{d("remote_address", "a"), withHits(d("path", "/login"), 0)}}, ok, []want{{ok, 6, 10}, {ok, 5, 5}}},
		}},
		{"refund", false, []step{
			{req("api", withHits(d("path", "/login"), 4)), ok, []want{{ok, 1, 5}}},
			{req("api", Descriptor{Entries: d("path", "/login").Entries, HasHits: true, Hits: 2, Negative: true}), ok, []want{{ok, 3, 5}}},
		}},
		{"the same descriptor twice is charged twice", false, []step{
			{req("api", d("path", "/login"), d("path", "/login")), ok, []want{{ok, 4, 5}, {ok, 3, 5}}},
			{req("api", d("path", "/login")), ok, []want{{ok, 2, 5}}},
		}},
		{"shadow rule never denies and is left unchanged", false, []step{
			{req("api", d("shadowed", "x"), d("remote_address", "r")), ok, []want{{ok, 0, 1}, {ok, 9, 10}}},
			{req("api", d("shadowed", "x"), d("remote_address", "r")), ok, []want{{ok, 0, 1}, {ok, 8, 10}}},
		}},
		{"unlimited, replaces", false, []step{
			{req("api", d("internal", "yes"), d("path", "/login")), ok, []want{{ok, math.MaxUint32, 0}, {ok, 0, 0}}},
			{req("api", d("path", "/login")), ok, []want{{ok, 4, 5}}},
		}},
		{"no rule, unknown domain", false, []step{
			{req("api", d("nope", "x")), ok, []want{{ok, 0, 0}}},
			{req("other", d("path", "/login")), ok, []want{{ok, 0, 0}}},
		}},
		{"zero limit", false, []step{
			{req("api", d("zero", "x"), d("remote_address", "z")), over, []want{{over, 0, 0}, {ok, 10, 10}}},
		}},
		{"wildcard and share_threshold", false, []step{
			{req("api", d("path", "/static/a.css")), ok, []want{{ok, 49, 50}}},
			{req("api", d("path", "/static/b.css")), ok, []want{{ok, 48, 50}}}, // one shared counter
			{req("api", d("path", "/api/v1")), ok, []want{{ok, 99, 100}}},
			{req("api", d("path", "/api/v2")), ok, []want{{ok, 99, 100}}}, // one counter per value
		}},
		{"nested descriptors", false, []step{
			{req("api", d("client", "mobile", "route", "r1"), d("client", "mobile")), ok, []want{{ok, 1, 2}, {ok, 2, 3}}},
			{req("api", d("tenant", "t", "plan", "free")), ok, []want{{ok, 99, 100}}},
		}},
		{"--rls-shadow keeps each code, overall OK, charges the rest", true, []step{
			{req("api", withHits(d("path", "/login"), 5)), ok, []want{{ok, 0, 5}}},
			{req("api", d("path", "/login"), d("remote_address", "s")), ok, []want{{over, 0, 5}, {ok, 9, 10}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ex := newService(t, "testdata/config", tc.shadow)
			for si, st := range tc.steps {
				resp, err := s.Decide(context.Background(), ex, &st.req)
				if err != nil {
					t.Fatalf("step %d: %v", si, err)
				}
				if resp.Overall != st.overall {
					t.Errorf("step %d: overall %s, want %s", si, resp.Overall, st.overall)
				}
				for i, w := range st.st {
					g := resp.Statuses[i]
					rpu := uint32(0)
					if g.Limit != nil {
						rpu = g.Limit.RequestsPerUnit
					}
					if g.Code != w.code || g.Remaining != w.remain || rpu != w.rpu {
						t.Errorf("step %d descriptor %d: %s remaining %d limit %d, want %s %d %d", si, i, g.Code, g.Remaining, rpu, w.code, w.remain, w.rpu)
					}
				}
			}
		})
	}
}

func TestDurationUntilReset(t *testing.T) {
	s, ex := newService(t, "testdata/config", false)
	ex.now = t0 + 5e9 + 1 // 10:05.000000001 past the hour
	resp, err := s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{
		d("remote_address", "x"), d("path", "/login"), d("tenant", "t", "plan", "gold"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Windows run to their end even for a counter at 0 (zero), as
	// envoyproxy/ratelimit; a token bucket until it is full again.
	sec := ex.now / 1e9
	wantReset := []int64{3600 - sec%3600, 60 - sec%60, 605} // 604.8 s per token, rounded up
	for i, w := range wantReset {
		if g := resp.Statuses[i].ResetSeconds; g != w {
			t.Errorf("descriptor %d: reset %d s, want %d", i, g, w)
		}
	}
	resp, err = s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{d("zero", "z")}})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := resp.Statuses[0].ResetSeconds, 365*86400-sec%(365*86400); g != w {
		t.Errorf("zero limit: reset %d s, want %d", g, w)
	}
	resp, err = s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{
		d("remote_address", "x"), d("path", "/login"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantReset = wantReset[:2]
	for i, w := range wantReset {
		if g := resp.Statuses[i].ResetSeconds; g != w {
			t.Errorf("descriptor %d: reset %d s, want %d", i, g, w)
		}
	}
	if u := resp.Statuses[0].Limit.Unit; u != rules.UnitHour {
		t.Errorf("unit %s", u)
	}
	if n := resp.Statuses[1].Limit.Name; n != "login" {
		t.Errorf("name %q", n)
	}
}

// TestEmptyDescriptor: a descriptor without entries matches no rule (OK,
// no limit), as in envoyproxy/ratelimit.
func TestEmptyDescriptor(t *testing.T) {
	s, ex := newService(t, "testdata/config", false)
	r, err := s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{{}, d("path", "/login")}})
	if err != nil || r.Overall != CodeOK || r.Statuses[0].Limit != nil || r.Statuses[1].Remaining != 4 {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestOverride(t *testing.T) {
	s, ex := newService(t, "testdata/config", false)
	o := d("shadowed", "x")
	o.Override = &Override{RequestsPerUnit: 2, Unit: rules.UnitMinute}
	for i, w := range []Code{CodeOK, CodeOK, CodeOverLimit} {
		resp, err := s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{o}})
		if err != nil {
			t.Fatal(err)
		}
		// The override is never shadow, though the rule it replaces is.
		if resp.Overall != w || resp.Statuses[0].Limit.RequestsPerUnit != 2 || resp.Statuses[0].Limit.Unit != rules.UnitMinute {
			t.Fatalf("call %d: %+v %+v", i, resp, resp.Statuses[0].Limit)
		}
	}
	// An override in an unknown domain is ignored, as envoyproxy/ratelimit.
	resp, _ := s.Decide(context.Background(), ex, &Request{Domain: "nope", Descriptors: []Descriptor{o}})
	if resp.Statuses[0].Limit != nil {
		t.Fatal("override applied in an unknown domain")
	}
	o.Override.Unit = rules.UnitUnknown
	_, err := s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{o}})
	var bad *BadRequestError
	if !errors.As(err, &bad) {
		t.Fatalf("unknown unit: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	s, ex := newService(t, "testdata/config", false)
	s.cfg.MaxKeyLen = 64
	for _, r := range []Request{
		{Domain: "", Descriptors: []Descriptor{d("a", "b")}},
		{Domain: "api"},
		{Domain: "api", Descriptors: []Descriptor{withHits(d("path", "/login"), 1<<60)}},
		{Domain: "api", Descriptors: []Descriptor{d("remote_address", strings.Repeat("x", 60))}},
	} {
		_, err := s.Decide(context.Background(), ex, &r)
		var bad *BadRequestError
		if !errors.As(err, &bad) {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

func TestMetrics(t *testing.T) {
	s, ex := newService(t, "testdata/config", false)
	run := func(r Request) {
		t.Helper()
		if _, err := s.Decide(context.Background(), ex, &r); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 6; i++ { // login 5/minute: 5 within (the 5th near: 4 = 80%), 1 over
		run(req("api", d("path", "/login")))
	}
	run(req("api", d("shadowed", "a")))
	run(req("api", d("shadowed", "a")))
	run(req("api", d("shadowed", "b"))) // one series per rule, not per value
	run(req("api", d("user", "alice")))
	run(req("api", d("user", "bob"))) // value_to_metric: one per value
	got := map[string]RuleStats{}
	for _, st := range s.Stats() {
		got[st.Rule] = st
	}
	if g := got["api.path_/login"]; g.TotalHits != 6 || g.WithinLimit != 5 || g.OverLimit != 1 || g.NearLimit != 1 || g.Domain != "api" {
		t.Errorf("login: %+v", g)
	}
	if g := got["api.shadowed"]; g.TotalHits != 3 || g.ShadowOverLimit != 1 || g.OverLimit != 1 || g.WithinLimit != 2 {
		t.Errorf("shadowed: %+v", g)
	}
	if got["api.user_alice"].TotalHits != 1 || got["api.user_bob"].TotalHits != 1 {
		t.Errorf("value_to_metric: %+v", got)
	}
	if len(got) != 4 {
		t.Errorf("%d series: %+v", len(got), got)
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n")
	s, ex := newService(t, dir, false)
	v1 := s.Rules().Version()
	decide := func() Code {
		r, err := s.Decide(context.Background(), ex, &Request{Domain: "a", Descriptors: []Descriptor{d("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Overall
	}
	if decide() != CodeOK || decide() != CodeOverLimit {
		t.Fatal("limit 1 not enforced")
	}
	// A bad file keeps the old rules and says why.
	write("b.yaml", "domain: b\ndescriptors: [{key: k, quota_mode: true}]\n")
	if _, err := s.Reload(); err == nil || !strings.Contains(err.Error(), "quota_mode") {
		t.Fatalf("bad reload: %v", err)
	}
	if _, errs, last := s.LoadStats(); errs != 1 || !strings.Contains(last, "b.yaml") {
		t.Fatalf("load errors %d, last %q", errs, last)
	}
	if s.Rules().Version() != v1 || decide() != CodeOverLimit {
		t.Fatal("a bad reload changed the rules")
	}
	// A good one applies at once; the counter is kept (raising a limit
	// does not reset it).
	os.Remove(filepath.Join(dir, "b.yaml"))
	write("a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 3}}]\n")
	set, err := s.Reload()
	if err != nil || set.Version() == v1 || s.Rules().Version() == v1 {
		t.Fatalf("good reload: %v", err)
	}
	if decide() != CodeOK || decide() != CodeOK || decide() != CodeOverLimit {
		t.Fatal("the raised limit is not 3 with the old count of 1")
	}
	if loads, _, last := s.LoadStats(); loads != 2 || last != "" {
		t.Fatalf("loads %d last %q", loads, last)
	}
}

func TestCounterKey(t *testing.T) {
	l := &rules.Limit{Unit: rules.UnitHour}
	k := string(CounterKey(nil, "api", []rules.Entry{{Key: "a|b", Value: "c=d"}, {Key: "e", Value: ""}}, nil, l))
	if k != `{api}|a\|b=c\=d|e=|hour` {
		t.Fatalf("key %q", k)
	}
	l.Algorithm = rules.Token
	k = string(CounterKey(nil, "x{y}", []rules.Entry{{Key: "p", Value: "/static/a"}}, []string{"/static*"}, l))
	if !strings.HasPrefix(k, "{rls-") || !strings.HasSuffix(k, "}|p=/static*|hour|token") {
		t.Fatalf("key %q", k)
	}
}

// TestMetricSeriesBound: value-named series stop at MaxSeries; the values
// beyond count in their rule's own series.
func TestMetricSeriesBound(t *testing.T) {
	s, err := New(Config{Dir: "testdata/config", MaxSeries: 2, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ex := &memExec{e: engine.New(engine.Config{Stripes: 8}), now: t0}
	for _, u := range []string{"a", "b", "c", "d"} {
		if _, err := s.Decide(context.Background(), ex, &Request{Domain: "api", Descriptors: []Descriptor{d("user", u)}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]uint64{}
	for _, st := range s.Stats() {
		got[st.Rule] = st.TotalHits
	}
	if len(got) != 3 || got["api.user_a"] != 1 || got["api.user_b"] != 1 || got["api.user"] != 2 {
		t.Fatalf("series %v", got)
	}
}

// BenchmarkDecide: one request of three descriptors, matched, decided on an
// in-memory engine and turned into a response.
func BenchmarkDecide(b *testing.B) {
	s, err := New(Config{Dir: "testdata/config", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ex := &memExec{e: engine.New(engine.Config{Stripes: 8}), now: t0}
	req := &Request{Domain: "api", Descriptors: []Descriptor{
		d("remote_address", "10.0.0.1"), d("tenant", "t", "plan", "free"), d("path", "/api/v1"),
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Decide(ctx, ex, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMaxLogLimit: a log rule beyond the engine's bound is a load error.
func TestMaxLogLimit(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "l.yaml"), []byte("domain: l\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 101, algorithm: log}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Dir: dir, MaxLogLimit: 100, Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), `l.yaml: descriptor "l.k": field "rate_limit.requests_per_unit": 101 exceeds --max-log-limit 100`) {
		t.Fatalf("error %v", err)
	}
	if _, err := New(Config{Dir: dir, MaxLogLimit: 101, Log: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
}

// TestResponseHeaders: the descriptor closest to its limit, or the last one
// over it, as envoyproxy/ratelimit picks it.
func TestResponseHeaders(t *testing.T) {
	lim := &CurrentLimit{RequestsPerUnit: 10, Unit: rules.UnitHour}
	for _, c := range []struct {
		sts  []Status
		want string
	}{
		{[]Status{{Code: CodeOK, Limit: lim, Remaining: 5, ResetSeconds: 9}, {Code: CodeOK, Limit: lim, Remaining: 3, ResetSeconds: 8}, {Code: CodeOK, Limit: lim, Remaining: 3, ResetSeconds: 7}}, "10 3 8"},
		{[]Status{{Code: CodeOverLimit, Limit: lim, ResetSeconds: 1}, {Code: CodeOK, Limit: lim, Remaining: 0, ResetSeconds: 2}, {Code: CodeOverLimit, Limit: lim, ResetSeconds: 3}}, "10 0 3"},
		{[]Status{{Code: CodeOK, Remaining: math.MaxUint32}, {Code: CodeOK}}, ""},
	} {
		var got []string
		for _, h := range responseHeaders(c.sts) {
			got = append(got, h.Value)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%+v: %v, want %s", c.sts, got, c.want)
		}
	}
}

// TestPlanKeysShareSlot: every counter of a request carries the domain as
// its hash tag, so all of them are in one Redis Cluster slot (one Raft
// group), whatever the entries, and cluster.Host routes the op by its first.
func TestPlanKeysShareSlot(t *testing.T) {
	s, _ := newService(t, "testdata/config", false)
	p, err := s.Prepare(&Request{Domain: "api", Descriptors: []Descriptor{
		d("remote_address", "10.0.0.1"), d("path", "/login"), d("tenant", "t{x}", "plan", "gold"), d("user", "}{"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	op := p.Op()
	if op.Code != engine.OpRateLimit || len(op.All) != 4 {
		t.Fatalf("op %+v", op)
	}
	want := slots.Of([]byte("{api}"))
	for _, l := range op.All {
		if got := slots.Of(l.Key); got != want {
			t.Errorf("key %q in slot %d, want %d", l.Key, got, want)
		}
	}
}

// failingExec keeps the operations it was given and fails, as an executor
// that gave up waiting for a cluster which may still apply them.
type failingExec struct{ kept [][]byte }

func (f *failingExec) Execute(_ context.Context, ops []engine.Op, _ []engine.Result) error {
	for _, l := range ops[0].All {
		f.kept = append(f.kept, l.Key)
	}
	return errors.New("gave up")
}

// TestPlansReused: Decide reuses its plans, and a reused plan answers as a
// fresh one: the same requests (three descriptors, one, three, one, ...)
// through Decide and through Prepare/Execute/Finish on a second service and
// engine, which never reuses a plan, get equal responses at every step. A
// plan whose executor failed is not reused, so the keys that executor may
// still hold are never overwritten.
func TestPlansReused(t *testing.T) {
	s, ex := newService(t, "testdata/config", false)
	f, fex := newService(t, "testdata/config", false)
	three := req("api", d("shadowed", "x"), d("remote_address", "10.0.0.1"), d("user", "u1"))
	one := req("api", d("path", "/login"), d("remote_address", "10.0.0.2")) // /login: 5 a minute, denied from its 6th
	for i := range 14 {
		r := three
		if i%2 == 1 {
			r = one
		}
		got, err := s.Decide(context.Background(), ex, &r)
		if err != nil {
			t.Fatal(err)
		}
		p, err := f.Prepare(&r)
		if err != nil {
			t.Fatal(err)
		}
		var res engine.Result
		if p.HasOp() {
			rs := make([]engine.Result, 1)
			if err := fex.Execute(context.Background(), []engine.Op{p.Op()}, rs); err != nil {
				t.Fatal(err)
			}
			res = rs[0]
		}
		want, err := f.Finish(p, &res)
		if err != nil {
			t.Fatal(err)
		}
		if !equalResponses(got, want) {
			t.Fatalf("step %d: Decide answered %+v, a fresh plan %+v", i, got, want)
		}
	}

	fail := &failingExec{}
	if _, err := s.Decide(context.Background(), fail, &three); err == nil {
		t.Fatal("a failing executor's error was lost")
	}
	held := make([]string, len(fail.kept))
	for i, k := range fail.kept {
		held[i] = string(k)
	}
	for range 3 {
		if _, err := s.Decide(context.Background(), ex, &one); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range fail.kept {
		if string(k) != held[i] {
			t.Fatalf("a key held by a failed executor changed from %q to %q: its plan was reused", held[i], k)
		}
	}
}

func equalResponses(a, b *Response) bool {
	if a.Overall != b.Overall || len(a.Statuses) != len(b.Statuses) {
		return false
	}
	for i := range a.Statuses {
		x, y := a.Statuses[i], b.Statuses[i]
		if x.Code != y.Code || x.Remaining != y.Remaining || x.ResetSeconds != y.ResetSeconds || (x.Limit == nil) != (y.Limit == nil) || x.Limit != nil && *x.Limit != *y.Limit {
			return false
		}
	}
	return true
}
