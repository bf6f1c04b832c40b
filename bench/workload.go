package bench

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// Algorithm names one of sluice's five limiter algorithms.
type Algorithm string

// The algorithms, named as the -workload flag spells them.
const (
	AlgToken   Algorithm = "token"
	AlgLeaky   Algorithm = "leaky"
	AlgFixed   Algorithm = "fixed"
	AlgSliding Algorithm = "sliding"
	AlgLog     Algorithm = "log"
	// AlgAll3 is one RL.ALL of three token buckets per request: the
	// picked key (a user), the tenant it belongs to (AllTenantDiv users
	// a tenant) and a shared key of AllGlobalDiv users (a region, a
	// model): layered limits decided all or nothing.
	AlgAll3 Algorithm = "all3"
	// AlgIncrExpire is envoyproxy/ratelimit's request: a pipeline of
	// INCRBY key cost and EXPIRE key window (Redis string commands, the
	// same on sluice and on redis-server). It counts and never denies.
	AlgIncrExpire Algorithm = "incr-expire"
)

// The fan-in of AlgAll3's layers: user i belongs to tenant
// i/AllTenantDiv and to the shared key i/AllGlobalDiv.
const (
	AllTenantDiv = 100
	AllGlobalDiv = 10_000
)

// Algorithms lists every algorithm in the order reports print them.
func Algorithms() []Algorithm {
	return []Algorithm{AlgToken, AlgLeaky, AlgFixed, AlgSliding, AlgLog}
}

// ParseAlgorithm parses a workload name: one of Algorithms, all3 or
// incr-expire.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range append(Algorithms(), AlgAll3, AlgIncrExpire) {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("unknown workload %q (want token, leaky, fixed, sliding, log, all3 or incr-expire)", s)
}

// Command is the sluice command of the algorithm.
func (a Algorithm) Command() string {
	switch a {
	case AlgToken:
		return "RL.TOKEN"
	case AlgLeaky:
		return "RL.LEAKY"
	case AlgFixed:
		return "RL.FIXED"
	case AlgSliding:
		return "RL.SLIDING"
	case AlgLog:
		return "RL.LOG"
	case AlgAll3:
		return "RL.ALL"
	case AlgIncrExpire:
		return "INCRBY"
	}
	return ""
}

// IsBucket reports whether the algorithm takes a rate (token, leaky, and
// all3's token buckets) rather than a window.
func (a Algorithm) IsBucket() bool { return a == AlgToken || a == AlgLeaky || a == AlgAll3 }

// Params are the arguments of one limiter call. For a bucket the rate is
// RateN units per Period; for a window algorithm Period is the window.
type Params struct {
	Limit  int64
	RateN  int64
	Period time.Duration
	Cost   int64
}

// RatePerSecond is the bucket's rate in units per second.
func (p Params) RatePerSecond() float64 {
	return float64(p.RateN) / p.Period.Seconds()
}

// MaxLogLimit is sluice's default --max-log-limit, the largest RL.LOG limit.
const MaxLogLimit = 100_000

// AllowParams are limits high enough that no request of cost c is denied
// during a benchmark: buckets of 2^40 that refill one unit a minute (so a
// touched key stays live for minutes rather than being reclaimed at once),
// windows of an hour. RL.LOG is capped by --max-log-limit: a single hot key
// is denied after MaxLogLimit units in the hour, and the reports show the
// measured share of denials.
func AllowParams(a Algorithm, cost int64) Params {
	switch {
	case a.IsBucket():
		return Params{Limit: 1 << 40, RateN: 1, Period: time.Minute, Cost: cost}
	case a == AlgLog:
		return Params{Limit: MaxLogLimit, Period: time.Hour, Cost: cost}
	default:
		return Params{Limit: 1 << 40, Period: time.Hour, Cost: cost}
	}
}

// DenyParams are limits that admit a key's first request of cost c and deny
// every later one during a benchmark: a limit of c, refilled at one unit
// an hour or over an hour's window.
func DenyParams(a Algorithm, cost int64) Params {
	c := max(cost, 1)
	if a.IsBucket() {
		return Params{Limit: c, RateN: 1, Period: time.Hour, Cost: cost}
	}
	return Params{Limit: c, Period: time.Hour, Cost: cost}
}

// Workload is what the load generator sends.
//
// A share DenyShare of the requests (drawn at random, per request) goes to
// a twin of the picked key ("<prefix>d:<index>") whose limit was used up
// before the run, and is denied; the others go to "<prefix>a:<index>" (just
// "<prefix><index>" when nothing is to be denied) with limits that are never
// reached. The denied share is thereby what was asked for at any
// throughput and with any key distribution, where limits tuned to a request
// rate would deny a share that depends on the server's speed.
type Workload struct {
	Alg       Algorithm
	Keys      uint64  // number of distinct keys (per variant)
	Dist      Dist    // how a request picks its key
	DenyShare float64 // share of requests to exhausted keys, 0..1
	Cost      int64   // units per request (COST n), >= 1
	Prefix    string  // key prefix; default "b:<alg>:"
	// Allow and Deny override AllowParams and DenyParams when their Limit
	// is non-zero.
	Allow, Deny Params
}

// Validate checks the workload and fills defaults.
func (w *Workload) Validate() error {
	var errs []error
	if _, err := ParseAlgorithm(string(w.Alg)); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseDist(string(w.Dist)); err != nil {
		errs = append(errs, err)
	}
	if w.Keys < 1 {
		errs = append(errs, fmt.Errorf("keys: want at least 1, got %d", w.Keys))
	}
	if w.DenyShare < 0 || w.DenyShare > 1 {
		errs = append(errs, fmt.Errorf("deny share: want 0 to 1, got %g", w.DenyShare))
	}
	if w.Cost < 1 {
		errs = append(errs, fmt.Errorf("cost: want at least 1, got %d", w.Cost))
	}
	if w.Alg == AlgIncrExpire && w.DenyShare > 0 {
		errs = append(errs, errors.New("deny share: incr-expire counts and never denies"))
	}
	if w.Alg == AlgLog && w.Cost > MaxLogLimit {
		errs = append(errs, fmt.Errorf("cost: at most %d for the log", MaxLogLimit))
	}
	if w.Prefix == "" {
		w.Prefix = "b:" + string(w.Alg) + ":"
	}
	if w.Allow.Limit == 0 {
		w.Allow = AllowParams(w.Alg, w.Cost)
	}
	if w.Deny.Limit == 0 {
		w.Deny = DenyParams(w.Alg, w.Cost)
	}
	return errors.Join(errs...)
}

// String is a short name such as "token uniform/100000 deny=10% cost=5".
func (w Workload) String() string {
	s := fmt.Sprintf("%s %s", w.Alg, w.Dist)
	if w.Dist != DistHot {
		s += "/" + strconv.FormatUint(w.Keys, 10)
	}
	if w.DenyShare > 0 {
		s += fmt.Sprintf(" deny=%g%%", w.DenyShare*100)
	}
	if w.Cost > 1 {
		s += fmt.Sprintf(" cost=%d", w.Cost)
	}
	return s
}

// AllowPrefix is the prefix of the keys that are never denied:
// "<prefix>a:", or just the prefix when the workload has no denied share.
func (w Workload) AllowPrefix() string {
	if w.DenyShare == 0 {
		return w.Prefix
	}
	return w.Prefix + "a:"
}

// DenyPrefix is the prefix of the keys whose limit is used up.
func (w Workload) DenyPrefix() string { return w.Prefix + "d:" }

// Template is a request with the key left out: Head, then the key as a bulk
// string, then Tail. Building a request is two appends and the key.
//
// A layered template (RL.ALL) has Layers: after Tail, each layer's key, then
// the layer's Tail. The layer keys of the request for prefix+index are
// derived from the index (AppendIndex).
type Template struct {
	Head, Tail []byte
	Layers     []Layer
	// Replies is the number of replies a request gets (0 means 1); the
	// decision is the last one.
	Replies int
}

// extraReplies is how many replies of a request come before its decision.
func (t Template) extraReplies() int { return max(t.Replies, 1) - 1 }

// sameKey reports whether every key of a request is the request's own
// key (layers of prefix "" and divisor 1): such a request may be routed by
// its key.
func (t Template) sameKey() bool {
	for _, l := range t.Layers {
		if l.Prefix != "" || l.Div > 1 {
			return false
		}
	}
	return true
}

// Layer is one further key of a layered request: for the request of
// prefix+index (AppendKey), the key prefix+Prefix+index/Div, then Tail.
type Layer struct {
	Prefix string
	Div    uint64
	Tail   []byte
}

// Append appends the request for key to b; a layered template's layers
// need the key's index, see AppendIndex.
func (t Template) Append(b, key []byte) []byte {
	b = append(b, t.Head...)
	b = respwire.AppendBulk(b, key)
	return append(b, t.Tail...)
}

// AppendIndex appends the request for the key prefix+i (as AppendKey
// spells it) to b, with the keys of its layers, without allocating.
func (t Template) AppendIndex(b []byte, prefix string, i uint64) []byte {
	b = append(b, t.Head...)
	b = appendBulkKey(b, prefix, "", i)
	b = append(b, t.Tail...)
	for _, l := range t.Layers {
		b = appendBulkKey(b, prefix, l.Prefix, i/max(l.Div, 1))
		b = append(b, l.Tail...)
	}
	return b
}

// appendBulkKey appends the key p1+p2+i (AppendKey's digits) as a bulk
// string.
func appendBulkKey(b []byte, p1, p2 string, i uint64) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], i, 10)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(p1)+len(p2)+max(len(d), KeyDigits)), 10)
	b = append(b, '\r', '\n')
	b = AppendKey(append(b, p1...), p2, i)
	return append(b, '\r', '\n')
}

// Dialect spells limiter requests for one kind of server.
type Dialect interface {
	// Name is a short description for reports.
	Name() string
	// Template builds the request of algorithm a with parameters p.
	Template(a Algorithm, p Params) (Template, error)
}

// SluiceDialect spells requests as sluice's RL.* commands.
type SluiceDialect struct{}

// Name implements Dialect.
func (SluiceDialect) Name() string { return "RL.* commands" }

// Template implements Dialect.
func (SluiceDialect) Template(a Algorithm, p Params) (Template, error) {
	if a == AlgIncrExpire {
		return incrExpireTemplate(p), nil
	}
	if a == AlgAll3 {
		return allTemplate(p), nil
	}
	args := SluiceArgs(a, p)
	if args == nil {
		return Template{}, fmt.Errorf("unknown algorithm %q", a)
	}
	head := respwire.AppendArray(nil, len(args)+2)
	head = respwire.AppendBulk(head, a.Command())
	var tail []byte
	for _, s := range args {
		tail = respwire.AppendBulk(tail, s)
	}
	return Template{Head: head, Tail: tail}, nil
}

// incrExpireTemplate is AlgIncrExpire's request: INCRBY key cost, then
// EXPIRE key window-in-seconds (the key again, as a layer of the same
// key), two replies.
func incrExpireTemplate(p Params) Template {
	head := respwire.AppendBulk(respwire.AppendArray(nil, 3), "INCRBY")
	tail := respwire.AppendBulk(nil, strconv.FormatInt(p.Cost, 10))
	tail = respwire.AppendBulk(respwire.AppendArray(tail, 3), "EXPIRE")
	secs := max(int64(p.Period/time.Second), 1)
	return Template{Head: head, Tail: tail, Replies: 2,
		Layers: []Layer{{Div: 1, Tail: respwire.AppendBulk(nil, strconv.FormatInt(secs, 10))}}}
}

// allTemplate is AlgAll3's request: RL.ALL 3 TOKEN <user> limit rate cost
// TOKEN <tenant> ... TOKEN <shared> .... The user's limit is p (the denied
// share exhausts it); the tenant's and the shared key's are never reached
// (AllowParams), so a denied call is denied by the user's limit alone and,
// all or nothing, charges neither of the others.
func allTemplate(p Params) Template {
	limitArgs := func(p Params) []byte {
		b := respwire.AppendBulk(nil, strconv.FormatInt(p.Limit, 10))
		b = respwire.AppendBulk(b, fmt.Sprintf("%d/%dms", p.RateN, p.Period.Milliseconds()))
		return respwire.AppendBulk(b, strconv.FormatInt(p.Cost, 10))
	}
	algo := respwire.AppendBulk(nil, "TOKEN")
	head := respwire.AppendArray(nil, 2+3*5)
	head = respwire.AppendBulk(head, "RL.ALL")
	head = respwire.AppendBulk(head, "3")
	head = append(head, algo...)
	up := AllowParams(AlgToken, p.Cost)
	tail := append(limitArgs(p), algo...)
	mid := append(limitArgs(up), algo...)
	return Template{Head: head, Tail: tail, Layers: []Layer{
		{Prefix: "t:", Div: AllTenantDiv, Tail: mid},
		{Prefix: "g:", Div: AllGlobalDiv, Tail: limitArgs(up)},
	}}
}

// SluiceArgs are the arguments after the key of a's sluice command: the
// limit, the rate as N/<ms>ms or the window in ms, and COST when not 1.
func SluiceArgs(a Algorithm, p Params) []string {
	if a.Command() == "" {
		return nil
	}
	ms := p.Period.Milliseconds()
	args := []string{strconv.FormatInt(p.Limit, 10)}
	if a.IsBucket() {
		args = append(args, fmt.Sprintf("%d/%dms", p.RateN, ms))
	} else {
		args = append(args, fmt.Sprintf("%dms", ms))
	}
	if p.Cost != 1 {
		args = append(args, "COST", strconv.FormatInt(p.Cost, 10))
	}
	return args
}

// EchoDialect sends ECHO key whatever the algorithm: the cheapest request
// that still carries the key, to measure the load generator's ceiling. The
// load counts its bulk reply as allowed.
type EchoDialect struct{}

// Name implements Dialect.
func (EchoDialect) Name() string { return "ECHO key (no limiter: the ceiling)" }

// Template implements Dialect.
func (EchoDialect) Template(Algorithm, Params) (Template, error) {
	return Template{Head: respwire.AppendBulk(respwire.AppendArray(nil, 2), "ECHO")}, nil
}

// LuaDialect spells requests as EVALSHA of the scripts in lua/, loaded into
// the server with SCRIPT LOAD; the SHA1s are computed locally.
type LuaDialect struct {
	// Anchor calls the anchor token bucket script (1 or 0, no cost) for
	// the token algorithm, and refuses the others.
	Anchor bool
}

// Name implements Dialect.
func (d LuaDialect) Name() string {
	if d.Anchor {
		return "EVALSHA anchor token_bucket.lua"
	}
	return "EVALSHA lua/*.lua"
}

// Template implements Dialect.
func (d LuaDialect) Template(a Algorithm, p Params) (Template, error) {
	if a == AlgIncrExpire { // Redis's own commands: no script
		return incrExpireTemplate(p), nil
	}
	var sha string
	if d.Anchor {
		if a != AlgToken {
			return Template{}, fmt.Errorf("the anchor script is a token bucket only, not %s", a)
		}
		if p.Cost != 1 {
			return Template{}, fmt.Errorf("the anchor script takes no cost (got %d)", p.Cost)
		}
		sha = ScriptSHA(AnchorScript)
	} else {
		s, ok := ScriptFor(a)
		if !ok {
			return Template{}, fmt.Errorf("no Lua script for %q", a)
		}
		sha = ScriptSHA(s)
	}
	args := LuaArgs(a, p)
	if d.Anchor {
		args = args[:2]
	}
	head := respwire.AppendArray(nil, len(args)+4)
	head = respwire.AppendBulk(head, "EVALSHA")
	head = respwire.AppendBulk(head, sha)
	head = respwire.AppendBulk(head, "1")
	var tail []byte
	for _, s := range args {
		tail = respwire.AppendBulk(tail, s)
	}
	return Template{Head: head, Tail: tail}, nil
}

// LuaArgs are the ARGV of a's script: the limit, the rate in units per
// second or the window in ms, and the cost.
func LuaArgs(a Algorithm, p Params) []string {
	args := []string{strconv.FormatInt(p.Limit, 10)}
	if a.IsBucket() {
		args = append(args, strconv.FormatFloat(p.RatePerSecond(), 'g', -1, 64))
	} else {
		args = append(args, strconv.FormatInt(p.Period.Milliseconds(), 10))
	}
	return append(args, strconv.FormatInt(p.Cost, 10))
}
