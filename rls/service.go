// Package rls is the decision of sluice's Envoy rate limit service (SPEC
// section 12, docs/design.md "The Envoy rate limit service"): it matches a
// request's descriptors against the loaded rules (rls/rules), turns the
// request into one engine operation (engine.OpRateLimit) whose keys all
// carry the domain as their hash tag, and turns the operation's result into
// Envoy's response, counting the per-rule metrics. It knows neither gRPC nor
// RESP: rls/server serves the gRPC and HTTP front ends, resp the RL.CHECK
// command, all through the same Service.
package rls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls/rules"
)

// Executor runs engine operations, as resp's Executor (cluster.Host and the
// in-memory executor implement it).
type Executor interface {
	Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error
}

// Code is a descriptor's or a response's code; the values are Envoy's.
type Code int32

// Envoy's response codes.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

// String returns Envoy's name of the code.
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Override is a descriptor's `limit` in the request: it replaces the rule.
type Override struct {
	RequestsPerUnit uint32
	Unit            rules.Unit
}

// Descriptor is one descriptor of a request.
type Descriptor struct {
	Entries []rules.Entry
	// HasHits says that the descriptor sets its own hits_addend (Hits,
	// 0 being a peek); otherwise the request's counts.
	HasHits bool
	Hits    uint64
	// Negative makes the hits a refund (is_negative_hits).
	Negative bool
	Override *Override
}

// Request is Envoy's RateLimitRequest.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	Hits        uint32 // the request's hits_addend (0: 1)
}

// CurrentLimit is the limit a descriptor was judged by.
type CurrentLimit struct {
	RequestsPerUnit uint32
	Unit            rules.Unit
	Name            string
}

// Status is one descriptor's answer.
type Status struct {
	Code      Code
	Limit     *CurrentLimit // nil: no limit applied
	Remaining uint32
	// ResetSeconds is duration_until_reset (only with a Limit).
	ResetSeconds int64
}

// Response is Envoy's RateLimitResponse.
type Response struct {
	Overall  Code
	Statuses []Status
	// Headers are the response headers to add (Config.ResponseHeaders).
	Headers []Header
}

// Header is one response header for Envoy to add.
type Header struct{ Key, Value string }

// The headers Config.ResponseHeaders adds, named as envoyproxy/ratelimit's
// defaults name them.
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// BadRequestError is a request the service refuses (gRPC InvalidArgument,
// HTTP 400, a RESP error).
type BadRequestError struct{ Reason string }

func (e *BadRequestError) Error() string { return e.Reason }

func badRequest(format string, args ...any) error {
	return &BadRequestError{Reason: fmt.Sprintf(format, args...)}
}

// MaxHits bounds a descriptor's hits (the engine's largest cost, 2^53).
const MaxHits = 1 << 53

// Config configures a Service.
type Config struct {
	// Dir is --rls-config: the directory of rule files.
	Dir string
	// Shadow is --rls-shadow: every rule is a shadow rule for charging
	// and the overall code is always OK.
	Shadow bool
	// MaxSeries bounds the per-rule metric series (detailed_metric and
	// value_to_metric name one per value); 0 means 10000. Beyond it, a
	// new series counts in its rule's own series.
	MaxSeries int
	// MaxLogLimit is the engine's largest RL.LOG limit (--max-log-limit):
	// a rule with `algorithm: log` above it is a load error. 0: no check.
	MaxLogLimit int64
	// MaxKeyLen bounds a counter's key (--max-key-len): a descriptor whose
	// key would be longer is a bad request. 0: no bound.
	MaxKeyLen int
	// ResponseHeaders adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset to every response with a limit, for the descriptor
	// closest to its limit (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
	Log             *slog.Logger
}

// Service holds the loaded rules and the metrics, and decides requests.
// It is safe for concurrent use; a reload swaps the rules atomically.
type Service struct {
	cfg     Config
	log     *slog.Logger
	set     atomic.Pointer[rules.Set]
	metrics *metrics
	plans   sync.Pool // *Plan: Decide's, reused once its response is built

	reloadMu   sync.Mutex // one reload at a time
	loads      atomic.Uint64
	loadErrors atomic.Uint64
	lastErr    atomic.Pointer[string]
}

// New loads the rules of cfg.Dir; an error there is a start-up error.
func New(cfg Config) (*Service, error) {
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = 10000
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Service{cfg: cfg, log: cfg.Log, metrics: newMetrics(cfg.MaxSeries)}
	set, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("--rls-config: %w", err)
	}
	s.set.Store(set)
	s.loads.Add(1)
	s.log.Info("rls rules loaded", "dir", cfg.Dir, "domains", len(set.Domains()), "rules", set.NumRules(), "version", set.Version())
	return s, nil
}

// load reads the directory and checks the rules against the engine's
// bounds.
func (s *Service) load() (*rules.Set, error) {
	set, err := rules.LoadDir(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	for _, d := range set.Domains() {
		for _, l := range d.Rules {
			if s.cfg.MaxLogLimit > 0 && l.Algorithm == rules.Log && int64(l.RequestsPerUnit) > s.cfg.MaxLogLimit {
				return nil, &rules.LoadError{File: d.File, Path: l.Path, Field: "rate_limit.requests_per_unit",
					Reason: fmt.Sprintf("%d exceeds --max-log-limit %d for algorithm log", l.RequestsPerUnit, s.cfg.MaxLogLimit)}
			}
		}
	}
	return set, nil
}

// Rules returns the rules in force.
func (s *Service) Rules() *rules.Set { return s.set.Load() }

// Shadow reports whether --rls-shadow is on.
func (s *Service) Shadow() bool { return s.cfg.Shadow }

// Reload re-reads the directory. On an error the rules in force stay, the
// error is logged and counted, and returned.
func (s *Service) Reload() (*rules.Set, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	set, err := s.load()
	if err != nil {
		s.loadErrors.Add(1)
		msg := err.Error()
		s.lastErr.Store(&msg)
		s.log.Error("rls rules reload failed; the previous rules stay in force", "dir", s.cfg.Dir, "err", err, "version", s.set.Load().Version())
		return nil, err
	}
	old := s.set.Swap(set)
	s.loads.Add(1)
	s.lastErr.Store(nil)
	s.log.Info("rls rules reloaded", "dir", s.cfg.Dir, "domains", len(set.Domains()), "rules", set.NumRules(), "version", set.Version(), "previous", old.Version())
	return set, nil
}

// LoadStats returns the successful loads, the failed ones and the last
// failure's text ("" after a success).
func (s *Service) LoadStats() (loads, errs uint64, last string) {
	if p := s.lastErr.Load(); p != nil {
		last = *p
	}
	return s.loads.Load(), s.loadErrors.Load(), last
}

// descriptor kinds in a Plan.
const (
	dNone      = iota // no rule, unknown domain, or replaced: OK, no limit
	dUnlimited        // OK, remaining 2^32-1
	dLimit            // judged by limits[idx]
)

type planned struct {
	kind  uint8
	idx   int // into Plan.limits
	limit *rules.Limit
	stat  string
	share []string
	hits  uint64
	cost  int64
}

// Plan is a request matched against the rules, ready to run as one engine
// operation (Op), or none when no descriptor has a limit.
type Plan struct {
	shadow bool
	desc   []planned
	limits []engine.Limit
	each   []engine.Result
	mask   uint64
	keyBuf []byte
	// Decide's operation and result, kept here so that a reused plan
	// carries them too.
	ops     [1]engine.Op
	results [1]engine.Result
}

// maxPooledKeys is the largest key buffer a plan keeps when reused: a
// request of many long descriptors does not pin its buffer.
const maxPooledKeys = 4 << 10

// newPlan returns an empty plan for n descriptors, reused when one is free.
func (s *Service) newPlan(n int) *Plan {
	p, _ := s.plans.Get().(*Plan)
	if p == nil {
		return &Plan{desc: make([]planned, n)}
	}
	p.desc = slices.Grow(p.desc[:0], n)[:n]
	return p
}

// release returns p for reuse, once nothing refers to its keys or results
// (Decide calls it after Finish, and only when the executor returned: an
// executor that gave up may still hold the operation).
func (s *Service) release(p *Plan) {
	if cap(p.keyBuf) > maxPooledKeys || cap(p.desc) > engine.MaxAll {
		return
	}
	clear(p.desc)
	clear(p.limits)
	clear(p.each)
	p.ops, p.results = [1]engine.Op{}, [1]engine.Result{}
	p.limits, p.each, p.keyBuf, p.mask = p.limits[:0], p.each[:0], p.keyBuf[:0], 0
	s.plans.Put(p)
}

// HasOp reports whether the plan needs the engine.
func (p *Plan) HasOp() bool { return len(p.limits) > 0 }

// Op returns the plan's engine operation (valid when HasOp).
func (p *Plan) Op() engine.Op {
	return engine.Op{Code: engine.OpRateLimit, All: p.limits, Shadow: p.mask, Each: p.each[:0:len(p.limits)]}
}

// Prepare matches req against the rules in force and plans its operation.
func (s *Service) Prepare(req *Request) (*Plan, error) {
	if req.Domain == "" {
		return nil, badRequest("rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		return nil, badRequest("rate limit descriptor list must not be empty")
	}
	set := s.set.Load()
	p := s.newPlan(len(req.Descriptors))
	p.shadow = s.cfg.Shadow
	known := set.Domain(req.Domain) != nil
	var replaced map[string]bool
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		pd := &p.desc[i]
		pd.hits = uint64(max(1, req.Hits))
		if d.HasHits {
			pd.hits = d.Hits
		}
		if pd.hits > MaxHits {
			return nil, badRequest("descriptor %d: hits_addend %d exceeds 2^53", i, pd.hits)
		}
		pd.cost = int64(pd.hits)
		if d.Negative {
			pd.cost = -pd.cost
		}
		if !known {
			continue
		}
		if o := d.Override; o != nil {
			if !o.Unit.Valid() {
				return nil, badRequest("descriptor %d: the limit override has no valid unit", i)
			}
			pd.kind = dLimit
			pd.limit = &rules.Limit{Path: overridePath(req.Domain, d.Entries), Domain: req.Domain, RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, Override: true}
			pd.stat = pd.limit.Path
			continue
		}
		m := set.Lookup(req.Domain, d.Entries)
		if m.Limit == nil {
			continue
		}
		for _, r := range m.Limit.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		pd.limit, pd.stat = m.Limit, m.StatKey
		if m.Limit.Unlimited {
			pd.kind = dUnlimited
			continue
		}
		pd.kind, pd.share = dLimit, m.Share
	}
	n := 0
	for i := range p.desc {
		pd := &p.desc[i]
		if pd.kind == dLimit && pd.limit.Name != "" && replaced[pd.limit.Name] {
			pd.kind = dNone
		}
		if pd.kind == dLimit {
			n++
		}
	}
	if n > engine.MaxAll {
		return nil, badRequest("%d descriptors with a limit: at most %d per request", n, engine.MaxAll)
	}
	p.limits = slices.Grow(p.limits[:0], n)
	p.each = slices.Grow(p.each[:0], n)[:n]
	for i := range p.desc {
		pd := &p.desc[i]
		if pd.kind != dLimit {
			continue
		}
		start := len(p.keyBuf)
		p.keyBuf = CounterKey(p.keyBuf, req.Domain, req.Descriptors[i].Entries, pd.share, pd.limit)
		if n := len(p.keyBuf) - start; s.cfg.MaxKeyLen > 0 && n > s.cfg.MaxKeyLen {
			return nil, badRequest("descriptor %d: its counter's key of %d bytes exceeds max-key-len %d", i, n, s.cfg.MaxKeyLen)
		}
		pd.idx = len(p.limits)
		if p.shadow || pd.limit.ShadowMode && !pd.limit.Override {
			p.mask |= 1 << uint(pd.idx)
		}
		p.limits = append(p.limits, engine.Limit{Key: p.keyBuf[start:len(p.keyBuf):len(p.keyBuf)], Rule: engineRule(pd.limit), Cost: pd.cost})
	}
	return p, nil
}

// overridePath names a request's limit override in the metrics: the
// domain, the descriptor's keys (never its values) and ":override".
func overridePath(domain string, entries []rules.Entry) string {
	n := len(domain) + len(":override")
	for _, e := range entries {
		n += 1 + len(e.Key)
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for _, e := range entries {
		b = append(b, '.')
		b = append(b, e.Key...)
	}
	return string(append(b, ":override"...))
}

// engineRule is the engine's rule for a limit: a window of one unit for
// fixed, sliding and log; for token and leaky a capacity of
// requests_per_unit refilled (drained) over one unit. A limit of 0 stays 0:
// the engine denies every positive cost without a key.
func engineRule(l *rules.Limit) engine.Rule {
	unit := l.Unit.Seconds() * 1e9
	r := engine.Rule{Limit: int64(l.RequestsPerUnit), Period: unit}
	switch l.Algorithm {
	case rules.Fixed:
		r.Kind = engine.KindFixed
	case rules.Sliding:
		r.Kind = engine.KindSliding
	case rules.Log:
		r.Kind = engine.KindLog
	case rules.Token, rules.Leaky:
		r.Kind = engine.KindToken
		if l.Algorithm == rules.Leaky {
			r.Kind = engine.KindLeaky
		}
		if r.Limit > 0 {
			r.Period = max(1, unit/r.Limit)
		}
	}
	return r
}

// Decide runs one request through exec: Prepare, one Execute, Finish.
func (s *Service) Decide(ctx context.Context, exec Executor, req *Request) (*Response, error) {
	p, err := s.Prepare(req)
	if err != nil {
		return nil, err
	}
	var res engine.Result
	if p.HasOp() {
		p.ops[0] = p.Op()
		if err := exec.Execute(ctx, p.ops[:], p.results[:]); err != nil {
			return nil, err // p is not reused: the executor may still hold its keys
		}
		res = p.results[0]
	}
	out, err := s.Finish(p, &res)
	s.release(p) // the response refers to nothing of p
	return out, err
}

// Finish turns the operation's result into the response and counts the
// metrics. res is ignored when the plan has no operation; res.Err (a key
// of another kind, the memory limit) is returned as is.
func (s *Service) Finish(p *Plan, res *engine.Result) (*Response, error) {
	if p.HasOp() {
		if res.Err != nil {
			return nil, res.Err
		}
		if len(res.Each) != len(p.limits) {
			return nil, fmt.Errorf("rls: %d results for %d limits", len(res.Each), len(p.limits))
		}
	}
	nowSec := res.Time / 1e9
	out := &Response{Overall: CodeOK, Statuses: make([]Status, len(p.desc))}
	for i := range p.desc {
		pd := &p.desc[i]
		st := &out.Statuses[i]
		st.Code = CodeOK
		switch pd.kind {
		case dNone:
			continue
		case dUnlimited:
			st.Remaining = math.MaxUint32
			continue
		}
		r := &res.Each[pd.idx]
		lim := pd.limit
		st.Limit = &CurrentLimit{RequestsPerUnit: lim.RequestsPerUnit, Unit: lim.Unit, Name: lim.Name}
		w := lim.Unit.Seconds()
		switch {
		case (lim.Algorithm == rules.Token || lim.Algorithm == rules.Leaky) && lim.RequestsPerUnit > 0:
			st.ResetSeconds = (r.ResetAfter + 999) / 1000
		default:
			st.ResetSeconds = w - nowSec%w
		}
		if r.Allowed {
			st.Remaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
		} else {
			st.Code = CodeOverLimit
			if lim.ShadowMode && !lim.Override {
				st.Code = CodeOK
			}
		}
		if st.Code == CodeOverLimit {
			out.Overall = CodeOverLimit
		}
		s.count(p, pd, r, res.Allowed)
	}
	if s.cfg.ResponseHeaders {
		out.Headers = responseHeaders(out.Statuses)
	}
	if s.cfg.Shadow {
		out.Overall = CodeOK
	}
	return out, nil
}

// responseHeaders picks the descriptor the headers describe as
// envoyproxy/ratelimit does: the first with the fewest remaining among
// those with a limit, unless one is over its limit (then the last such).
func responseHeaders(sts []Status) []Header {
	best := -1
	over := false
	for i := range sts {
		st := &sts[i]
		if st.Limit == nil {
			continue
		}
		switch {
		case st.Code == CodeOverLimit:
			best, over = i, true
		case !over && (best < 0 || st.Remaining < sts[best].Remaining):
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	st := &sts[best]
	return []Header{
		{HeaderLimit, strconv.FormatUint(uint64(st.Limit.RequestsPerUnit), 10)},
		{HeaderRemaining, strconv.FormatUint(uint64(st.Remaining), 10)},
		{HeaderReset, strconv.FormatInt(st.ResetSeconds, 10)},
	}
}

// count adds one descriptor's hits to its rule's series, as
// envoyproxy/ratelimit's stats count them (base_limiter.go): the hits over
// the limit, those at or above 80% of it (near), within it, and, for a
// shadow rule (or --rls-shadow), those it would have denied.
func (s *Service) count(p *Plan, pd *planned, r *engine.Result, allowed bool) {
	if pd.cost <= 0 {
		return
	}
	st := s.metrics.get(pd.limit, pd.stat)
	hits := pd.hits
	st.totalHits.Add(hits)
	limit := uint64(pd.limit.RequestsPerUnit)
	near := limit * 4 / 5
	used := uint64(0)
	if rem := r.Remaining; pd.limit.RequestsPerUnit > 0 && rem < int64(limit) {
		used = limit - uint64(max(rem, 0))
	}
	var before, after uint64
	if r.Allowed && allowed { // charged: used includes the hits
		after = used
		before = after - min(hits, after)
	} else {
		before, after = used, used+hits
	}
	if !r.Allowed {
		over := hits
		if before < limit {
			over = after - limit
			st.nearLimit.Add(limit - max(near, before))
		}
		st.overLimit.Add(over)
		if p.shadow || pd.limit.ShadowMode && !pd.limit.Override {
			st.shadowOverLimit.Add(over)
		}
		return
	}
	st.withinLimit.Add(hits)
	if after > near {
		if before >= near {
			st.nearLimit.Add(hits)
		} else {
			st.nearLimit.Add(after - near)
		}
	}
}
