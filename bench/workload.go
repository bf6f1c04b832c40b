package bench

import (
	"cmp"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// Algorithm names what a request does: one of sluice's five limiters, or
// AlgAll3, one RL.ALL of three token buckets per request: the picked key
// (a user), the tenant it belongs to (AllTenantDiv users a tenant) and a
// shared key of AllGlobalDiv users (a region, a model), layered limits
// decided all or nothing; or AlgIncrExpire, envoyproxy/ratelimit's request:
// a pipeline of INCRBY key cost and EXPIRE key window (Redis's commands,
// the same on sluice and on redis-server), which counts and never denies.
type Algorithm string

// The algorithms, named as the -workload flag spells them.
const (
	AlgToken      Algorithm = "token"
	AlgLeaky      Algorithm = "leaky"
	AlgFixed      Algorithm = "fixed"
	AlgSliding    Algorithm = "sliding"
	AlgLog        Algorithm = "log"
	AlgAll3       Algorithm = "all3"
	AlgIncrExpire Algorithm = "incr-expire"
	AllTenantDiv            = 100
	AllGlobalDiv            = 10_000
)

// Algorithms lists the limiter algorithms in the order reports print them.
func Algorithms() []Algorithm { return []Algorithm{AlgToken, AlgLeaky, AlgFixed, AlgSliding, AlgLog} }

// commands are each algorithm's sluice command and Redis script (lua/).
var commands = map[Algorithm][2]string{
	AlgToken: {"RL.TOKEN", "token_bucket.lua"}, AlgLeaky: {"RL.LEAKY", "leaky_bucket.lua"}, AlgFixed: {"RL.FIXED", "fixed_window.lua"},
	AlgSliding: {"RL.SLIDING", "sliding_window.lua"}, AlgLog: {"RL.LOG", "sliding_log.lua"}, AlgAll3: {"RL.ALL"}, AlgIncrExpire: {"INCRBY"},
}

// ParseAlgorithm parses a workload name.
func ParseAlgorithm(s string) (Algorithm, error) {
	if _, ok := commands[Algorithm(s)]; !ok {
		return "", fmt.Errorf("unknown workload %q (want token, leaky, fixed, sliding, log, all3 or incr-expire)", s)
	}
	return Algorithm(s), nil
}

// Command is the sluice command of the algorithm.
func (a Algorithm) Command() string { return commands[a][0] }

// isBucket reports whether the algorithm takes a rate rather than a window.
func (a Algorithm) isBucket() bool { return a == AlgToken || a == AlgLeaky || a == AlgAll3 }

// Params are the arguments of one limiter call. For a bucket the rate is
// RateN units per Period; for a window algorithm Period is the window.
type Params struct {
	Limit  int64
	RateN  int64
	Period time.Duration
	Cost   int64
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
	case a.isBucket():
		return Params{Limit: 1 << 40, RateN: 1, Period: time.Minute, Cost: cost}
	case a == AlgLog:
		return Params{Limit: MaxLogLimit, Period: time.Hour, Cost: cost}
	}
	return Params{Limit: 1 << 40, Period: time.Hour, Cost: cost}
}

// DenyParams are limits that admit a key's first request of cost c and deny
// every later one during a benchmark: a limit of c, refilled at one unit
// an hour or over an hour's window.
func DenyParams(a Algorithm, cost int64) Params {
	p := Params{Limit: max(cost, 1), Period: time.Hour, Cost: cost}
	if a.isBucket() {
		p.RateN = 1
	}
	return p
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
	_, errA := ParseAlgorithm(string(w.Alg))
	_, errD := ParseDist(string(w.Dist))
	errs := []error{errA, errD}
	for _, c := range []struct {
		bad bool
		err error
	}{
		{w.Keys < 1, fmt.Errorf("keys: want at least 1, got %d", w.Keys)},
		{w.DenyShare < 0 || w.DenyShare > 1, fmt.Errorf("deny share: want 0 to 1, got %g", w.DenyShare)},
		{w.Cost < 1, fmt.Errorf("cost: want at least 1, got %d", w.Cost)},
		{w.Alg == AlgIncrExpire && w.DenyShare > 0, errors.New("deny share: incr-expire counts and never denies")},
		{w.Alg == AlgLog && w.Cost > MaxLogLimit, fmt.Errorf("cost: at most %d for the log", MaxLogLimit)},
	} {
		if c.bad {
			errs = append(errs, c.err)
		}
	}
	w.Prefix = cmp.Or(w.Prefix, "b:"+string(w.Alg)+":")
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

// Template is a request with its keys left out: Head, the request's key,
// Tail, then for each Layer its key and Tail. Building a request is a few
// appends and the keys' digits (AppendIndex), no allocation.
type Template struct {
	Head, Tail []byte
	Layers     []Layer
	Replies    int // the replies a request gets (0 means 1); the decision is the last
}

// Layer is one further key of a request: for the request of prefix+index
// (AppendKey), the key prefix+Prefix+index/Div, then Tail.
type Layer struct {
	Prefix string
	Div    uint64
	Tail   []byte
}

// key is where compile puts the request's key; a Layer puts a layer's.
type key struct{}

// compile builds the template of the commands, whose arguments are
// strings, key{} (the request's key, first) and Layers.
func compile(cmds ...[]any) Template {
	t := Template{Replies: len(cmds)}
	cur := &t.Head
	for _, cmd := range cmds {
		*cur = respwire.AppendArray(*cur, len(cmd))
		for _, arg := range cmd {
			switch a := arg.(type) {
			case string:
				*cur = respwire.AppendBulk(*cur, a)
			case key:
				cur = &t.Tail
			case Layer:
				t.Layers = append(t.Layers, a)
				cur = &t.Layers[len(t.Layers)-1].Tail
			}
		}
	}
	return t
}

// AppendIndex appends the request for the key prefix+i (as AppendKey
// spells it) to b, with the keys of its layers, without allocating.
func (t Template) AppendIndex(b []byte, prefix string, i uint64) []byte {
	b = append(appendBulkKey(append(b, t.Head...), prefix, "", i), t.Tail...)
	for _, l := range t.Layers {
		b = append(appendBulkKey(b, prefix, l.Prefix, i/max(l.Div, 1)), l.Tail...)
	}
	return b
}

// appendBulkKey appends the key p1+p2+i (AppendKey's digits) as a bulk
// string.
func appendBulkKey(b []byte, p1, p2 string, i uint64) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], i, 10)
	b = strconv.AppendInt(append(b, '$'), int64(len(p1)+len(p2)+max(len(d), KeyDigits)), 10)
	b = AppendKey(append(append(b, '\r', '\n'), p1...), p2, i)
	return append(b, '\r', '\n')
}

// Dialect spells limiter requests for one kind of server: sluice's RL.*
// commands; EVALSHA of the scripts in lua/ (LoadScripts); EVALSHA of the
// anchor token bucket script (1 or 0, no cost: token workloads only); or
// ECHO key whatever the workload, the cheapest request that still carries
// the key, to measure the load generator's ceiling (the load counts its
// bulk reply as allowed). incr-expire is Redis's own commands on every
// server.
type Dialect string

// The dialects.
const (
	SluiceDialect Dialect = "sluice"
	LuaDialect    Dialect = "lua"
	AnchorDialect Dialect = "anchor"
	EchoDialect   Dialect = "echo"
)

// Template is the request of algorithm a with parameters p.
func (d Dialect) Template(a Algorithm, p Params) (Template, error) {
	script, args := commands[a][1], luaArgs(a, p)
	switch {
	case d == EchoDialect:
		return compile([]any{"ECHO", key{}}), nil
	case a == AlgIncrExpire: // INCRBY key cost, then EXPIRE key window-in-seconds, two replies
		secs := strconv.FormatInt(max(int64(p.Period/time.Second), 1), 10)
		return compile([]any{"INCRBY", key{}, strconv.FormatInt(p.Cost, 10)}, []any{"EXPIRE", Layer{Div: 1}, secs}), nil
	case d == SluiceDialect && a == AlgAll3:
		// RL.ALL 3 TOKEN <user> ... TOKEN <tenant> ... TOKEN <shared> ...:
		// the user's limit is p (the denied share exhausts it), the
		// others' are never reached, so a denied call is denied by the
		// user's limit alone and, all or nothing, charges neither other.
		up := AllowParams(AlgToken, p.Cost)
		rate := func(p Params) string { return fmt.Sprintf("%d/%dms", p.RateN, p.Period.Milliseconds()) }
		n, c := strconv.FormatInt, strconv.FormatInt(p.Cost, 10)
		return compile([]any{"RL.ALL", "3", "TOKEN", key{}, n(p.Limit, 10), rate(p), c,
			"TOKEN", Layer{Prefix: "t:", Div: AllTenantDiv}, n(up.Limit, 10), rate(up), c,
			"TOKEN", Layer{Prefix: "g:", Div: AllGlobalDiv}, n(up.Limit, 10), rate(up), c}), nil
	case d == SluiceDialect && a.Command() != "":
		return compile(append([]any{a.Command(), key{}}, sluiceArgs(a, p)...)), nil
	case d == AnchorDialect && (a != AlgToken || p.Cost != 1):
		return Template{}, fmt.Errorf("the anchor script is a token bucket without cost, not %s with cost %d", a, p.Cost)
	case d == AnchorDialect:
		script, args = AnchorScript, args[:2]
	case d != LuaDialect || script == "":
		return Template{}, fmt.Errorf("no %s request for %q", d, a)
	}
	return compile(append([]any{"EVALSHA", ScriptSHA(script), "1", key{}}, args...)), nil
}

// sluiceArgs are the arguments after the key of a's sluice command: the
// limit, the rate as N/<ms>ms or the window in ms, and COST when not 1.
func sluiceArgs(a Algorithm, p Params) []any {
	ms := p.Period.Milliseconds()
	args := []any{strconv.FormatInt(p.Limit, 10), fmt.Sprintf("%dms", ms)}
	if a.isBucket() {
		args[1] = fmt.Sprintf("%d/%dms", p.RateN, ms)
	}
	if p.Cost != 1 {
		args = append(args, "COST", strconv.FormatInt(p.Cost, 10))
	}
	return args
}

// luaArgs are the ARGV of a's script: the limit, the rate in units per
// second or the window in ms, and the cost.
func luaArgs(a Algorithm, p Params) []any {
	period := strconv.FormatInt(p.Period.Milliseconds(), 10)
	if a.isBucket() {
		period = strconv.FormatFloat(float64(p.RateN)/p.Period.Seconds(), 'g', -1, 64)
	}
	return []any{strconv.FormatInt(p.Limit, 10), period, strconv.FormatInt(p.Cost, 10)}
}

//go:embed lua/*.lua
var luaFS embed.FS

// AnchorScript is the anchor measurement's token bucket, under lua/.
const AnchorScript = "anchor_token_bucket.lua"

// ScriptSHA is the SHA1 of a script under lua/, as EVALSHA names it; empty
// for an unknown script.
func ScriptSHA(name string) string {
	src, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		return ""
	}
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// LoadScripts loads every script under lua/ into a Redis server with
// SCRIPT LOAD and checks that the server names each by its ScriptSHA.
func LoadScripts(addr string) error {
	files, err := luaFS.ReadDir("lua")
	for _, f := range files {
		src, _ := luaFS.ReadFile("lua/" + f.Name())
		v, err := doAt(addr, "SCRIPT", "LOAD", string(src))
		if err != nil {
			return fmt.Errorf("SCRIPT LOAD %s: %w", f.Name(), err)
		}
		if want := ScriptSHA(f.Name()); v.Str != want {
			return fmt.Errorf("SCRIPT LOAD %s: server named it %q, want %q", f.Name(), v.Str, want)
		}
	}
	return err
}
