package resp

import (
	"bytes"
	"strconv"

	"github.com/sluice-rl/sluice/engine"
)

// ttlMillis and ttlSeconds are pending.arg values telling renderTTL which
// unit to reply in.
const (
	ttlMillis  = 0
	ttlSeconds = 1
)

// keyspaceCommands are the state commands (docs/commands.md, "State
// commands"): they read, list and delete limiter keys.
func keyspaceCommands() []*command {
	return []*command{
		{
			name: "del", arity: -2, flags: flagWrite,
			firstKey: 1, lastKey: -1, keyStep: 1, group: "keyspace", since: "1.0.0", complexity: "O(N) keys",
			summary: "Forget the state of the keys (as RL.RESET)",
			args:    []argDoc{multiple(keyArg("key"))},
			run:     runPerKey(engine.OpDelete), render: renderCountSum,
		},
		{
			name: "unlink", arity: -2, flags: flagWrite | flagFast,
			firstKey: 1, lastKey: -1, keyStep: 1, group: "keyspace", since: "1.0.0", complexity: "O(N) keys",
			summary: "Forget the state of the keys (as DEL)",
			args:    []argDoc{multiple(keyArg("key"))},
			run:     runPerKey(engine.OpDelete), render: renderCountSum,
		},
		{
			name: "exists", arity: -2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: -1, keyStep: 1, group: "keyspace", since: "1.0.0", complexity: "O(N) keys",
			summary: "Count how many of the keys hold limiter state",
			args:    []argDoc{multiple(keyArg("key"))},
			run:     runPerKey(engine.OpExists), render: renderCountSum,
		},
		{
			name: "type", arity: 2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "keyspace", since: "1.0.0", complexity: "O(1)",
			summary: "The kind of limiter a key holds: token, leaky, fixed, sliding, log, gcra, concurrency or none",
			args:    []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpType, Key: args[1]})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				if results[0].Err != nil {
					r.Error(errorText(results[0].Err))
					return
				}
				r.Simple(results[0].Kind.String())
			},
		},
		ttlCommand("pttl", ttlMillis, "Milliseconds until the key is back at its initial state; -2 if absent"),
		ttlCommand("ttl", ttlSeconds, "Seconds until the key is back at its initial state; -2 if absent"),
		{
			name: "dbsize", arity: 1, flags: flagReadonly | flagFast,
			group: "server", since: "1.0.0", complexity: "O(1)",
			summary: "The number of keys holding limiter state",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpCount})
			},
			render: renderCount,
		},
		{
			name: "flushall", arity: -1, flags: flagWrite,
			group: "server", since: "1.0.0", complexity: "O(N) keys",
			summary: "Forget every key",
			args:    []argDoc{optional(argDoc{name: "flush-type", typ: "oneof", subargs: []argDoc{{name: "async", typ: "pure-token", token: "ASYNC"}, {name: "sync", typ: "pure-token", token: "SYNC"}}})},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if len(args) > 2 || len(args) == 2 && !bytes.EqualFold(args[1], []byte("async")) && !bytes.EqualFold(args[1], []byte("sync")) {
					c.local.Error(msgSyntax.Text())
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpFlush})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) { r.OK() },
		},
		{
			name: "keys", arity: 2, flags: flagReadonly,
			op:    engine.OpKeys,
			group: "keyspace", since: "1.0.0", complexity: "O(N) keys",
			summary: "Every key matching a glob pattern",
			args:    []argDoc{{name: "pattern", typ: "pattern"}},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpKeys, Pattern: args[1]})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				r.Array(len(results[0].Keys))
				for _, k := range results[0].Keys {
					r.Bulk(k)
				}
			},
		},
		{
			name: "scan", arity: -2, flags: flagReadonly,
			op:    engine.OpScan,
			group: "keyspace", since: "2.8.0", complexity: "O(1) per call",
			summary: "Iterate over the keys",
			args: []argDoc{intArg("cursor"), optional(tokenArg("MATCH", "pattern", "pattern")),
				optional(tokenArg("COUNT", "count", "integer")), optional(tokenArg("TYPE", "type", "string"))},
			run: runScan,
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				res := &results[0]
				r.Array(2)
				r.BulkString(strconv.FormatUint(res.Cursor, 10))
				r.Array(len(res.Keys))
				for _, k := range res.Keys {
					r.Bulk(k)
				}
			},
		},
	}
}

func ttlCommand(name string, unit int64, summary string) *command {
	return &command{
		name: name, arity: 2, flags: flagReadonly | flagFast,
		firstKey: 1, lastKey: 1, keyStep: 1, group: "keyspace", since: "1.0.0", complexity: "O(1)",
		summary: summary,
		args:    []argDoc{keyArg("key")},
		run: func(s *Server, c *client, args [][]byte, p *pending) {
			p.arg = unit
			c.enqueue(p, engine.Op{Code: engine.OpTTL, Key: args[1]})
		},
		render: renderTTL,
	}
}

// renderTTL converts the engine's nanoseconds to PTTL's milliseconds (rounded
// up, so a live key never shows 0) or TTL's seconds (rounded to nearest, as
// Redis does).
func renderTTL(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	ns := results[0].TTL
	if results[0].Err != nil {
		r.Error(errorText(results[0].Err))
		return
	}
	if ns < 0 {
		r.Int(ns)
		return
	}
	ms := (ns + 999_999) / 1_000_000
	if results[0].Kind == engine.KindString {
		ms = ns // a string key's expiry is counted in milliseconds
	}
	if p.arg == ttlSeconds {
		r.Int((ms + 500) / 1000)
		return
	}
	r.Int(ms)
}

func renderCount(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	r.Int(results[0].Count)
}

// runScan parses `SCAN cursor [MATCH pattern] [COUNT n] [TYPE kind]`.
func runScan(s *Server, c *client, args [][]byte, p *pending) {
	cursor, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		c.local.Error(msgInvalidCursor.Text())
		return
	}
	op := engine.Op{Code: engine.OpScan, Cursor: cursor, Count: 10}
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			c.local.Error(msgSyntax.Text())
			return
		}
		val := args[i+1]
		switch {
		case bytes.EqualFold(args[i], []byte("match")):
			op.Pattern = val
		case bytes.EqualFold(args[i], []byte("count")):
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil || n < 1 {
				c.local.Error(msgCountRange.Text())
				return
			}
			op.Count = min(n, 100000)
		case bytes.EqualFold(args[i], []byte("type")):
			kind, ok := engine.ParseKind(string(bytes.ToLower(val)))
			if !ok {
				// Redis replies an empty page for an unknown type; so do we,
				// but the scan must still end: filter by an impossible kind.
				kind = engine.Kind(255)
			}
			op.Rule.Kind = kind
		default:
			c.local.Error(msgSyntax.Text())
			return
		}
	}
	c.enqueue(p, op)
}
