package resp

import (
	"bytes"
	"strconv"

	"github.com/sluice-rl/sluice/engine"
)

// limiterCommands are the limiter commands (docs/commands.md, "Limiter
// commands"): one decision per call, on one or several keys.
func limiterCommands() []*command {
	rl := func(name string, kind engine.Kind, limitName, periodName, summary string) *command {
		return &command{
			name: name, arity: -4, flags: flagWrite | flagDenyOOM | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice", since: "1.0.0", complexity: "O(1)",
			summary: summary, decision: true,
			args: []argDoc{keyArg("key"), intArg(limitName), strArg(periodName), costArgDoc},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				s.runLimiter(c, args, p, kind)
			},
			render: renderDecision,
		}
	}
	logCmd := rl("rl.log", engine.KindLog, "limit", "window",
		"Sliding window log: allow if fewer than limit units were admitted in the last window")
	logCmd.complexity = "O(n) in the expired entries"
	return []*command{
		rl("rl.token", engine.KindToken, "capacity", "rate",
			"Token bucket: take cost tokens from a bucket of capacity refilled at rate"),
		rl("rl.leaky", engine.KindLeaky, "capacity", "rate",
			"Leaky bucket (meter): add cost units to a bucket of capacity draining at rate"),
		rl("rl.fixed", engine.KindFixed, "limit", "window",
			"Fixed window counter: allow at most limit units per epoch-aligned window"),
		rl("rl.sliding", engine.KindSliding, "limit", "window",
			"Sliding window counter: weighted count of this and the previous window"),
		logCmd,
		{
			name: "cl.throttle", arity: -5, flags: flagWrite | flagDenyOOM | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice", since: "1.0.0", complexity: "O(1)",
			summary: "redis-cell compatible GCRA rate limiting", decision: true,
			args: []argDoc{keyArg("key"), intArg("max_burst"), intArg("count"), intArg("period"),
				optional(intArg("quantity"))},
			run:    runThrottle,
			render: renderDecision,
		},
		{
			name: "rl.peek", arity: 2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice", since: "1.0.0", complexity: "O(1)",
			summary: "Reply what the key's own command would with cost 0, or nil",
			args:    []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if s.checkKey(c, args[1]) {
					c.enqueue(p, engine.Op{Code: engine.OpPeek, Key: args[1]})
				}
			},
			render: renderDecision,
		},
		rlAllCommand(),
		rlAcquireCommand(),
		rlReleaseCommand(),
		{
			name: "rl.reset", arity: -2, flags: flagWrite,
			firstKey: 1, lastKey: -1, keyStep: 1, group: "sluice", since: "1.0.0", complexity: "O(N) keys",
			summary: "Forget the state of the keys; reply how many existed",
			args:    []argDoc{multiple(keyArg("key"))},
			run:     runPerKey(engine.OpDelete),
			render:  renderCountSum,
		},
	}
}

// checkKey replies an error and returns false when key is not a valid key.
func (s *Server) checkKey(c *client, key []byte) bool {
	if msg := s.keyError(key); msg != "" {
		c.local.Error(msg)
		return false
	}
	return true
}

// keyError returns the error text for an invalid key, or "".
func (s *Server) keyError(key []byte) string {
	if len(key) == 0 {
		return msgKeyEmpty.Text(strconv.Itoa(s.cfg.MaxKeyLen))
	}
	if len(key) > s.cfg.MaxKeyLen {
		return msgKeyLong.Text(strconv.Itoa(s.cfg.MaxKeyLen))
	}
	return ""
}

// limitNames are the names of the two parameters of each RL.* kind, as
// errors and COMMAND DOCS call them.
func limitNames(kind engine.Kind) (limitName, periodName string) {
	switch kind {
	case engine.KindToken, engine.KindLeaky:
		return "capacity", "rate"
	}
	return "limit", "window"
}

// parseRule parses the two parameters of an RL.* kind into its rule.
func (s *Server) parseRule(kind engine.Kind, a, b []byte) (engine.Rule, error) {
	limitName, periodName := limitNames(kind)
	limit, err := ParseInteger(limitName, a)
	if err != nil {
		return engine.Rule{}, err
	}
	if limit < 1 {
		return engine.Rule{}, NewArgError(limitName, a, "must be at least 1")
	}
	if (kind == engine.KindLog || kind == engine.KindConcurrency) && limit > s.cfg.MaxLogLimit {
		return engine.Rule{}, NewArgError("limit", a, "exceeds max-log-limit "+strconv.FormatInt(s.cfg.MaxLogLimit, 10))
	}
	var period int64
	switch kind {
	case engine.KindToken, engine.KindLeaky:
		period, err = ParseRate(periodName, b)
	case engine.KindConcurrency:
		period, err = ParseDuration("ttl", b)
	default:
		period, err = ParseDuration(periodName, b)
	}
	if err != nil {
		return engine.Rule{}, err
	}
	return engine.Rule{Kind: kind, Limit: limit, Period: period}, nil
}

// runLimiter parses `RL.X key limit period [COST n]` into an OpDecide.
func (s *Server) runLimiter(c *client, args [][]byte, p *pending, kind engine.Kind) {
	if !s.checkKey(c, args[1]) {
		return
	}
	rule, err := s.parseRule(kind, args[2], args[3])
	if err != nil {
		c.local.Error(err.Error())
		return
	}
	cost := int64(1)
	for i := 4; i < len(args); i += 2 {
		if !bytes.EqualFold(args[i], []byte("cost")) {
			c.local.Error(msgCostOption.Text(printable(args[i], 64), p.cmd.name))
			return
		}
		if i+1 >= len(args) {
			c.local.Error(msgOptionValue.Text("COST"))
			return
		}
		if cost, err = ParseCost("cost", args[i+1]); err != nil {
			c.local.Error(err.Error())
			return
		}
	}
	c.enqueue(p, engine.Op{Code: engine.OpDecide, Key: args[1], Rule: rule, Cost: cost})
}

// runThrottle parses `CL.THROTTLE key max_burst count period [quantity]`.
func runThrottle(s *Server, c *client, args [][]byte, p *pending) {
	if len(args) > 6 {
		c.local.Error(msgArity.Text("cl.throttle"))
		return
	}
	if !s.checkKey(c, args[1]) {
		return
	}
	var vals [4]int64
	names := [4]string{"max_burst", "count", "period", "quantity"}
	vals[3] = 1
	for i := 2; i < len(args); i++ {
		v, err := ParseInteger(names[i-2], args[i])
		if err != nil {
			c.local.Error(err.Error())
			return
		}
		vals[i-2] = v
	}
	burst, count, period, quantity := vals[0], vals[1], vals[2], vals[3]
	if count == 0 || period == 0 {
		c.local.Error(msgZeroRates.Text())
		return
	}
	if period > engine.MaxPeriod/nsPerSecond {
		c.local.Error(NewArgError("period", args[4], "must be at most "+strconv.FormatInt(engine.MaxPeriod/nsPerSecond, 10)+" seconds ("+strconv.Itoa(engine.MaxPeriodDays)+"d)").Error())
		return
	}
	interval := period * 1e9 / count
	if interval < 1 {
		c.local.Error(NewArgError("count", args[3], "more than 1000000000 per second").Error())
		return
	}
	if burst+1 > engine.MaxGCRASpan/interval {
		c.local.Error(NewArgError("max_burst", args[2], "the burst spans more than 146 years").Error())
		return
	}
	if quantity > engine.MaxGCRASpan/interval {
		c.local.Error(NewArgError("quantity", args[5], "the quantity spans more than 146 years").Error())
		return
	}
	c.enqueue(p, engine.Op{
		Code: engine.OpDecide,
		Key:  args[1],
		Rule: engine.Rule{Kind: engine.KindGCRA, Limit: burst + 1, Period: interval},
		Cost: quantity,
	})
}

// renderDecision writes the five-integer reply of a limiter decision, in
// redis-cell's format for a GCRA key; nil for a peek of an absent key.
func renderDecision(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	if res.Err != nil {
		r.Error(errorText(res.Err))
		return
	}
	if res.Kind == engine.KindNone {
		r.Null()
		return
	}
	r.Array(5)
	allowed := int64(0)
	if res.Allowed {
		allowed = 1
	}
	if res.Kind == engine.KindGCRA {
		r.Int(1 - allowed) // redis-cell replies "limited"
	} else {
		r.Int(allowed)
	}
	r.Int(res.Limit)
	r.Int(res.Remaining)
	r.Int(res.RetryAfter)
	r.Int(res.ResetAfter)
}

// runPerKey returns a run function that enqueues one op per key argument
// (DEL, RL.RESET, EXISTS).
func runPerKey(code engine.OpCode) func(s *Server, c *client, args [][]byte, p *pending) {
	return func(s *Server, c *client, args [][]byte, p *pending) {
		for _, key := range args[1:] {
			if len(key) > s.cfg.MaxKeyLen {
				// Such a key cannot exist: skip it, but keep the reply's shape.
				continue
			}
			c.enqueue(p, engine.Op{Code: code, Key: key})
		}
		p.deferred = true
	}
}

// renderCountSum replies the sum of the results' counts.
func renderCountSum(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	var n int64
	for i := range results {
		if results[i].Err != nil {
			r.Error(errorText(results[i].Err))
			return
		}
		n += results[i].Count
	}
	r.Int(n)
}
