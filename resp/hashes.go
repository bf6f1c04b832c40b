package resp

import (
	"bytes"
	"strconv"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// The Redis hash commands (SPEC section 15, docs/commands.md "Hashes"):
// parsed and answered as redis-server 7.0 does (t_hash.c), byte for byte.
// The engine keeps the hashes (engine/hashes.go).

// pending.arg values of the hash renders.
const (
	hashReplyOK      = 1 // HMSET: +OK
	hashReplyExists  = 2 // HEXISTS: 1 or 0
	hashReplyStrlen  = 3 // HSTRLEN: the value's length
	hashReplyMap     = 4 // HGETALL: a map in RESP3
	hashReplyScan    = 5 // HSCAN: cursor 0 and the pairs
	hashReplyScanBad = 6 // HSCAN with a bad option: syntax error, if the key exists
	hashReplyScanInt = 7 // HSCAN with a COUNT not an integer, if the key exists
)

// hashCommands are the hash commands' table rows.
func hashCommands() []*command {
	cmd := func(name string, arity int, flags cmdFlags, since, complexity, summary string, args []argDoc,
		run func(s *Server, c *client, args [][]byte, p *pending), render func(s *Server, r *replyBuf, p *pending, results []engine.Result)) *command {
		return &command{name: name, arity: arity, flags: flags, firstKey: 1, lastKey: 1, keyStep: 1, group: "hash",
			since: since, complexity: complexity, summary: summary, args: args, run: run, render: render}
	}
	pairs := multiple(argDoc{name: "data", typ: "block", subargs: []argDoc{strArg("field"), strArg("value")}})
	hset := func(s *Server, c *client, args [][]byte, p *pending) {
		if len(args)%2 != 0 {
			c.local.Error(msgArity.Text(p.cmd.name))
			return
		}
		if p.cmd.name == "hmset" {
			p.arg = hashReplyOK
		}
		if s.checkKey(c, args[1]) && s.checkElems(c, args[2:]) {
			c.enqueue(p, engine.Op{Code: engine.OpHSet, Key: args[1], Args: args[2:]})
		}
	}
	getAll := func(flags uint32, reply int64) func(s *Server, c *client, args [][]byte, p *pending) {
		return func(s *Server, c *client, args [][]byte, p *pending) {
			p.arg = reply
			c.enqueue(p, engine.Op{Code: engine.OpHGetAll, Key: args[1], Flags: flags})
		}
	}
	hget := func(reply int64) func(s *Server, c *client, args [][]byte, p *pending) {
		return func(s *Server, c *client, args [][]byte, p *pending) {
			p.arg = reply
			c.enqueue(p, engine.Op{Code: engine.OpHGet, Key: args[1], Args: args[2:3]})
		}
	}
	return []*command{
		cmd("hset", -4, flagWrite|flagDenyOOM|flagFast, "2.0.0", "O(N) fields", "Set fields of a hash, reply how many were added",
			[]argDoc{keyArg("key"), pairs}, hset, renderCollCount),
		cmd("hmset", -4, flagWrite|flagDenyOOM|flagFast, "2.0.0", "O(N) fields", "Set fields of a hash (as HSET), reply OK",
			[]argDoc{keyArg("key"), pairs}, hset, renderCollCount),
		cmd("hsetnx", 4, flagWrite|flagDenyOOM|flagFast, "2.0.0", "O(1)", "Set a field of a hash only if it is absent",
			[]argDoc{keyArg("key"), strArg("field"), strArg("value")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				if s.checkKey(c, args[1]) && s.checkElems(c, args[2:]) {
					c.enqueue(p, engine.Op{Code: engine.OpHSet, Key: args[1], Args: args[2:], Flags: engine.HashNX})
				}
			}, renderCollCount),
		cmd("hget", 3, flagReadonly|flagFast, "2.0.0", "O(1)", "The value of a field of a hash",
			[]argDoc{keyArg("key"), strArg("field")}, hget(0), renderHGet),
		cmd("hexists", 3, flagReadonly|flagFast, "2.0.0", "O(1)", "Whether a hash has a field",
			[]argDoc{keyArg("key"), strArg("field")}, hget(hashReplyExists), renderHGet),
		cmd("hstrlen", 3, flagReadonly|flagFast, "3.2.0", "O(1)", "The length of a field's value",
			[]argDoc{keyArg("key"), strArg("field")}, hget(hashReplyStrlen), renderHGet),
		cmd("hmget", -3, flagReadonly|flagFast, "2.0.0", "O(N) fields", "The values of fields of a hash (nil for absent ones)",
			[]argDoc{keyArg("key"), multiple(strArg("field"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpHMGet, Key: args[1], Args: args[2:]})
			}, renderCollValues),
		cmd("hgetall", 2, flagReadonly, "2.0.0", "O(N)", "Every field and value of a hash, in insertion order",
			[]argDoc{keyArg("key")}, getAll(0, hashReplyMap), renderCollValues),
		cmd("hkeys", 2, flagReadonly, "2.0.0", "O(N)", "Every field of a hash, in insertion order",
			[]argDoc{keyArg("key")}, getAll(engine.HashKeys, 0), renderCollValues),
		cmd("hvals", 2, flagReadonly, "2.0.0", "O(N)", "Every value of a hash, in insertion order",
			[]argDoc{keyArg("key")}, getAll(engine.HashVals, 0), renderCollValues),
		cmd("hdel", -3, flagWrite|flagFast, "2.0.0", "O(N) fields", "Delete fields of a hash (the key with its last field)",
			[]argDoc{keyArg("key"), multiple(strArg("field"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpHDel, Key: args[1], Args: args[2:]})
			}, renderCollCount),
		cmd("hlen", 2, flagReadonly|flagFast, "2.0.0", "O(1)", "The number of fields of a hash",
			[]argDoc{keyArg("key")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpHLen, Key: args[1]})
			}, renderCollCount),
		cmd("hincrby", 4, flagWrite|flagDenyOOM|flagFast, "2.0.0", "O(1)", "Add an integer to a field's integer",
			[]argDoc{keyArg("key"), strArg("field"), intArg("increment")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				n, ok := engine.ParseInt(args[3])
				if !ok {
					c.local.Error(msgNotInteger.Text())
					return
				}
				if s.checkKey(c, args[1]) && s.checkElems(c, args[2:3]) {
					c.enqueue(p, engine.Op{Code: engine.OpHIncrBy, Key: args[1], Args: args[2:3], Delta: n})
				}
			}, renderCollCount),
		cmd("hincrbyfloat", 4, flagWrite|flagDenyOOM|flagFast, "2.6.0", "O(1)", "Add a float to a field's number",
			[]argDoc{keyArg("key"), strArg("field"), argDoc{name: "increment", typ: "double"}},
			func(s *Server, c *client, args [][]byte, p *pending) {
				f, ok := engine.ParseLongDouble(args[3])
				if !ok {
					c.local.Error(notFloatText())
					return
				}
				if f.IsInf() {
					c.local.Error(msgNaNOrInf.Text())
					return
				}
				if s.checkKey(c, args[1]) && s.checkElems(c, args[2:3]) {
					c.enqueue(p, engine.Op{Code: engine.OpHIncrByFloat, Key: args[1], Args: args[2:4]})
				}
			}, renderHGet),
		cmd("hscan", -3, flagReadonly, "2.8.0", "O(N)", "Iterate over a hash's fields and values (one call returns them all)",
			[]argDoc{keyArg("key"), intArg("cursor"), optional(tokenArg("MATCH", "pattern", "pattern")),
				optional(tokenArg("COUNT", "count", "integer"))},
			runHScan, renderCollValues),
	}
}

// runHScan parses HSCAN key cursor [MATCH pattern] [COUNT count] as Redis
// does: the cursor first; an option error is replied only when the key
// holds a hash (Redis looks the key up before it reads the options).
func runHScan(s *Server, c *client, args [][]byte, p *pending) {
	if _, err := strconv.ParseUint(string(args[2]), 10, 64); err != nil {
		c.local.Error(msgInvalidCursor.Text())
		return
	}
	p.arg = hashReplyScan
	op := engine.Op{Code: engine.OpHGetAll, Key: args[1]}
	bad := int64(0)
	for i := 3; i < len(args) && bad == 0; i += 2 {
		switch {
		case i+1 >= len(args):
			bad = hashReplyScanBad
		case bytes.EqualFold(args[i], []byte("count")):
			n, ok := engine.ParseInt(args[i+1])
			switch {
			case !ok:
				bad = hashReplyScanInt
			case n < 1:
				bad = hashReplyScanBad
			}
		case bytes.EqualFold(args[i], []byte("match")):
			op.Pattern = args[i+1]
			if len(op.Pattern) == 1 && op.Pattern[0] == '*' {
				op.Pattern = nil
			}
		default:
			bad = hashReplyScanBad
		}
	}
	if bad != 0 {
		p.arg = bad
		op.Pattern = nil
	}
	c.enqueue(p, op)
}

// checkElems checks that collection elements are within max-value-len.
func (s *Server) checkElems(c *client, elems [][]byte) bool {
	for _, e := range elems {
		if len(e) > s.cfg.MaxValueLen {
			c.local.Error(valueTooLongText(s.cfg.MaxValueLen))
			return false
		}
	}
	return true
}

func notFloatText() string { return codeText(&errcode.Error{Code: errcode.NotFloat}) }

// renderCollCount replies the result's count as an integer, or OK
// (HMSET).
func renderCollCount(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	switch {
	case res.Err != nil:
		r.Error(errorText(res.Err))
	case p.arg == hashReplyOK:
		r.OK()
	default:
		r.Int(res.Count)
	}
}

// renderHGet replies HGET's value or nil, HEXISTS's 1 or 0, HSTRLEN's
// length, HINCRBYFLOAT's value.
func renderHGet(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	switch {
	case res.Err != nil:
		r.Error(errorText(res.Err))
	case p.arg == hashReplyExists:
		r.Int(res.Count)
	case p.arg == hashReplyStrlen:
		r.Int(int64(len(res.Value)))
	case res.Kind == engine.KindNone:
		r.Null()
	default:
		r.Bulk(res.Value)
	}
}

// renderCollValues replies a list of values (nil elements as nil): an
// array, HGETALL's map in RESP3, HSCAN's cursor and page.
func renderCollValues(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	if res.Err != nil {
		r.Error(errorText(res.Err))
		return
	}
	switch p.arg {
	case hashReplyMap:
		r.Map(len(res.Values) / 2)
	case hashReplyScanBad, hashReplyScanInt:
		switch {
		case res.Kind != engine.KindNone && p.arg == hashReplyScanInt:
			r.Error(msgNotInteger.Text())
			return
		case res.Kind != engine.KindNone:
			r.Error(msgSyntax.Text())
			return
		}
		r.Array(2)
		r.BulkString("0")
		r.Array(0)
		return
	case hashReplyScan:
		r.Array(2)
		r.BulkString("0")
		r.Array(len(res.Values))
	default:
		r.Array(len(res.Values))
	}
	for _, v := range res.Values {
		if v == nil {
			r.Null()
		} else {
			r.Bulk(v)
		}
	}
}

// collectionCommands are the hash, sorted set and list commands.
func collectionCommands() []*command {
	list := hashCommands()
	list = append(list, zsetCommands()...)
	return append(list, listCommands()...)
}
