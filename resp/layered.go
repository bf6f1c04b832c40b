package resp

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/sluice-rl/sluice/engine"
)

// RL.ALL, RL.ACQUIRE and RL.RELEASE: layered limits decided all or nothing,
// and concurrency leases. Each parses into one engine op, so it goes
// through the Executor (and the replicated log) as one unit.

// allAlgorithm is the kind RL.ALL's ALGO argument names (case-insensitive):
// a layerable kind of the engine's table of kinds, by its name; KindNone
// for any other. allAlgorithmsText and rlAllCommand's algorithm argument
// list the same kinds (TestAllAlgorithmsFromTable).
func allAlgorithm(name []byte) engine.Kind {
	for k := engine.KindNone + 1; k < engine.NumKinds; k++ {
		if k.Layerable() && len(name) == len(k.String()) && bytes.EqualFold(name, []byte(k.String())) {
			return k
		}
	}
	return engine.KindNone
}

// allAlgorithmsText is the error detail of an ALGO argument that names no
// layerable kind.
const allAlgorithmsText = "must be TOKEN, LEAKY, FIXED, SLIDING or LOG"

func rlAllCommand() *command {
	algo := argDoc{name: "algorithm", typ: "oneof", subargs: []argDoc{
		{name: "token", typ: "pure-token", token: "TOKEN"},
		{name: "leaky", typ: "pure-token", token: "LEAKY"},
		{name: "fixed", typ: "pure-token", token: "FIXED"},
		{name: "sliding", typ: "pure-token", token: "SLIDING"},
		{name: "log", typ: "pure-token", token: "LOG"},
	}}
	return &command{
		name: "rl.all", arity: -7, flags: flagWrite | flagDenyOOM,
		firstKey: 3, lastKey: -4, keyStep: 5, group: "sluice", since: "1.1.0", complexity: "O(N) limits",
		summary: "Decide several limits at one instant: all are charged, or none",
		args: []argDoc{intArg("numlimits"), multiple(argDoc{name: "limit", typ: "block", subargs: []argDoc{
			algo, keyArg("key"), intArg("a"), strArg("b"), intArg("cost"),
		}})},
		decision: true,
		run:      runAll,
		render:   renderAll,
	}
}

func rlAcquireCommand() *command {
	return &command{
		name: "rl.acquire", arity: -6, flags: flagWrite | flagDenyOOM | flagFast,
		firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice", since: "1.1.0", complexity: "O(log N) leases",
		summary: "Take or renew a lease of cost units under a concurrency limit",
		args: []argDoc{keyArg("key"), intArg("limit"), strArg("ttl"), tokenArg("ID", "token", "string"),
			costArgDoc},
		decision: true,
		run:      runAcquire,
		render:   renderDecision,
	}
}

func rlReleaseCommand() *command {
	return &command{
		name: "rl.release", arity: 3, flags: flagWrite | flagFast,
		firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice", since: "1.1.0", complexity: "O(log N) leases",
		summary: "End a lease; reply 1 if it was live, else 0",
		args:    []argDoc{keyArg("key"), strArg("token")},
		run:     runRelease,
		render:  renderCountSum,
	}
}

// wrongArgs replies Redis's wrong-number-of-arguments error for p's command.
func wrongArgs(c *client, p *pending) {
	c.local.Error(msgArity.Text(p.cmd.name))
}

// runAll parses `RL.ALL numlimits ALGO key a b cost ...`. Every argument is
// checked first, in argument order: the count, numlimits, then each limit's
// algorithm, key length, parameters and cost; then whether a key came
// twice; the key types are the engine's to judge, all at once.
func runAll(s *Server, c *client, args [][]byte, p *pending) {
	if (len(args)-2)%5 != 0 {
		wrongArgs(c, p)
		return
	}
	n, err := ParseInteger("numlimits", args[1])
	if err != nil || n < 1 || n > engine.MaxAll {
		c.local.Error(NewArgError("numlimits", args[1], "must be an integer from 1 to 64").Error())
		return
	}
	if int64(len(args)) != 2+5*n {
		wrongArgs(c, p)
		return
	}
	start := len(c.limits)
	for i := int64(0); i < n; i++ {
		a := args[2+5*i : 7+5*i]
		kind := allAlgorithm(a[0])
		if kind == engine.KindNone {
			c.local.Error(NewArgError("algorithm", a[0], allAlgorithmsText).Error())
			c.limits = c.limits[:start]
			return
		}
		if msg := s.keyError(a[1]); msg != "" {
			c.local.Error(msg)
			c.limits = c.limits[:start]
			return
		}
		rule, err := c.rules.parse(s, kind, a[2], a[3])
		var cost int64
		if err == nil {
			cost, err = ParseCost("cost", a[4])
		}
		if err != nil {
			c.local.Error(err.Error())
			c.limits = c.limits[:start]
			return
		}
		c.limits = append(c.limits, engine.Limit{Key: a[1], Rule: rule, Cost: cost})
	}
	end := len(c.limits)
	// Every argument is valid: now whether a key came twice (the first key
	// seen again is named), before the engine judges the key types.
	for i := start + 1; i < end; i++ {
		for j := start; j < i; j++ {
			if bytes.Equal(c.limits[i].Key, c.limits[j].Key) {
				c.local.Error(duplicateKeyText(c.limits[i].Key))
				c.limits = c.limits[:start]
				return
			}
		}
	}
	es := len(c.each)
	c.each = slices.Grow(c.each, end-start)[:es+end-start]
	c.enqueue(p, engine.Op{Code: engine.OpAll, All: c.limits[start:end:end], Each: c.each[es : es+end-start : es+end-start]})
}

// ruleCache remembers the last rules a connection's RL.ALL calls parsed,
// keyed by their kind and the raw bytes of their two parameters: a client
// sends the same few limits call after call, and comparing a few bytes
// costs less than parsing a rate. It holds only rules whose validity
// depends on nothing but those bytes (not RL.LOG's, which max-log-limit
// bounds), and only arguments that parsed; it is the connection's own.
type ruleCache struct {
	ents [ruleCacheSize]ruleCacheEnt
	next int // the entry the next miss replaces
}

const (
	ruleCacheSize  = 4  // entries: RL.ALL's limits are usually few
	ruleCacheBytes = 48 // the longest two parameters remembered, together
)

type ruleCacheEnt struct {
	kind   engine.Kind // KindNone: empty
	la, lb uint8
	raw    [ruleCacheBytes]byte // the first parameter, then the second
	rule   engine.Rule
}

// parse is s.parseRule with the cache in front.
func (rc *ruleCache) parse(s *Server, kind engine.Kind, a, b []byte) (engine.Rule, error) {
	cacheable := kind != engine.KindLog && kind != engine.KindConcurrency && len(a)+len(b) <= ruleCacheBytes
	if cacheable {
		for i := range rc.ents {
			e := &rc.ents[i]
			if e.kind == kind && int(e.la) == len(a) && int(e.lb) == len(b) &&
				bytes.Equal(e.raw[:e.la], a) && bytes.Equal(e.raw[e.la:int(e.la)+len(b)], b) {
				return e.rule, nil
			}
		}
	}
	rule, err := s.parseRule(kind, a, b)
	if err != nil || !cacheable {
		return rule, err
	}
	e := &rc.ents[rc.next]
	rc.next = (rc.next + 1) % ruleCacheSize
	e.kind, e.la, e.lb, e.rule = kind, uint8(len(a)), uint8(len(b)), rule
	copy(e.raw[copy(e.raw[:], a):], b)
	return rule, nil
}

// renderAll writes RL.ALL's reply: the five combined integers, then one
// array of five per limit.
//
// The combined limit and remaining are those of one of the limits, and its
// reset the largest of theirs: a per-limit integer equal to the combined
// one in the same place copies the combined one's rendering instead of
// formatting it again (a fifth of the integers at least, often more when
// the limits share parameters).
func renderAll(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	if res.Err != nil {
		r.Error(errorText(res.Err))
		return
	}
	r.Array(5 + len(res.Each))
	vals := [5]int64{b2i(res.Allowed), res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter}
	var at [6]int // the combined integers' renderings are r.b[at[k]:at[k+1]]
	for k, v := range vals {
		at[k] = len(r.b)
		r.Int(v)
	}
	at[5] = len(r.b)
	for i := range res.Each {
		e := &res.Each[i]
		r.Array(5)
		for k, v := range [5]int64{b2i(e.Allowed), e.Limit, e.Remaining, e.RetryAfter, e.ResetAfter} {
			if v == vals[k] && uint64(v) >= 10 {
				r.b = append(r.b, r.b[at[k]:at[k+1]]...)
			} else {
				r.Int(v)
			}
		}
	}
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runAcquire parses `RL.ACQUIRE key limit ttl ID token [COST n]`; ID and
// COST may come in either order, and a repeated option keeps its last
// value.
func runAcquire(s *Server, c *client, args [][]byte, p *pending) {
	if !s.checkKey(c, args[1]) {
		return
	}
	rule, err := s.parseRule(engine.KindConcurrency, args[2], args[3])
	if err != nil {
		c.local.Error(err.Error())
		return
	}
	cost := int64(1)
	var token []byte
	for i := 4; i < len(args); i += 2 {
		isID, isCost := bytes.EqualFold(args[i], []byte("id")), bytes.EqualFold(args[i], []byte("cost"))
		if !isID && !isCost {
			c.local.Error(msgAcquireOption.Text(printable(args[i], 64)))
			return
		}
		if i+1 >= len(args) {
			if isCost {
				c.local.Error(msgOptionValue.Text("COST"))
			} else {
				c.local.Error(msgOptionValue.Text("ID"))
			}
			return
		}
		if isCost {
			if cost, err = ParseInteger("cost", args[i+1]); err != nil {
				c.local.Error(err.Error())
				return
			}
			continue
		}
		token = args[i+1]
		if msg := tokenError(token); msg != "" {
			c.local.Error(msg)
			return
		}
	}
	if token == nil {
		c.local.Error(msgAcquireID.Text())
		return
	}
	c.enqueue(p, engine.Op{Code: engine.OpAcquire, Key: args[1], Rule: rule, Cost: cost, Token: token})
}

// tokenError returns the error text for an invalid lease token, or "".
func tokenError(token []byte) string {
	if len(token) < 1 || len(token) > engine.MaxToken {
		return NewArgError("token", token, "must be 1 to "+strconv.Itoa(engine.MaxToken)+" bytes").Error()
	}
	return ""
}

// runRelease parses `RL.RELEASE key token`.
func runRelease(s *Server, c *client, args [][]byte, p *pending) {
	if !s.checkKey(c, args[1]) {
		return
	}
	if msg := tokenError(args[2]); msg != "" {
		c.local.Error(msg)
		return
	}
	c.enqueue(p, engine.Op{Code: engine.OpRelease, Key: args[1], Token: args[2]})
}
