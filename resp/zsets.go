package resp

import (
	"strings"

	"github.com/sluice-rl/sluice/engine"
)

// The Redis sorted set commands (SPEC section 15, docs/commands.md
// "Sorted sets"): parsed and answered as redis-server 7.0 does (t_zset.c),
// byte for byte; scores printed as its addReplyDouble prints them. The
// engine keeps the sorted sets (engine/zsets.go).

// pending.arg bits of the sorted set renders.
const (
	zReplyScores = 1 << iota // Values alternate members and scores
	zReplyPairs              // RESP3: each member and score as an array of two
	zReplyDouble             // a score (ZADD INCR, ZINCRBY), nil when not done
	zReplyOne                // ZSCORE: one score or nil
	zReplyRank               // ZRANK: an integer or nil
	zReplyCount              // ZADD: the count
)

func zsetCommands() []*command {
	cmd := func(name string, arity int, flags cmdFlags, since, complexity, summary string, args []argDoc,
		run func(s *Server, c *client, args [][]byte, p *pending), render func(s *Server, r *replyBuf, p *pending, results []engine.Result)) *command {
		return &command{name: name, arity: arity, flags: flags, firstKey: 1, lastKey: 1, keyStep: 1, group: "sorted-set",
			since: since, complexity: complexity, summary: summary, args: args, run: run, render: render}
	}
	rangeArgs := func(a, b string) []argDoc {
		return []argDoc{keyArg("key"), strArg(a), strArg(b)}
	}
	limitDoc := optional(argDoc{name: "limit", typ: "block", token: "LIMIT", subargs: []argDoc{intArg("offset"), intArg("count")}})
	withScores := optional(argDoc{name: "withscores", typ: "pure-token", token: "WITHSCORES"})
	byScore := func(name string, rev bool, summary string) *command {
		a, b := "min", "max"
		if rev {
			a, b = "max", "min"
		}
		return cmd(name, -4, flagReadonly, "1.0.5", "O(log(N)+M)", summary,
			append(rangeArgs(a, b), withScores, limitDoc),
			func(s *Server, c *client, args [][]byte, p *pending) {
				f := engine.ZByScore
				if rev {
					f |= engine.ZRev
				}
				runZRange(s, c, args, p, f, true)
			}, renderZValues)
	}
	remRange := func(name string, flags uint32, a, b, summary string) *command {
		return cmd(name, 4, flagWrite, "1.2.0", "O(log(N)+M)", summary, rangeArgs(a, b),
			func(s *Server, c *client, args [][]byte, p *pending) {
				if !zRangeArgsOK(c, flags, args[2], args[3]) {
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpZRemRange, Key: args[1], Args: args[2:4], Flags: flags})
			}, renderCollCount)
	}
	pop := func(name string, rev bool, summary string) *command {
		return cmd(name, -2, flagWrite|flagFast, "5.0.0", "O(log(N)*M)", summary,
			[]argDoc{keyArg("key"), optional(intArg("count"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				if len(args) > 3 {
					c.local.Error(msgSyntax.Text())
					return
				}
				op := engine.Op{Code: engine.OpZPop, Key: args[1], Count: 1}
				if rev {
					op.Flags = engine.ZRev
				}
				p.arg = zReplyScores
				if len(args) == 3 {
					n, ok := engine.ParseInt(args[2])
					switch {
					case !ok || n < 0:
						c.local.Error(msgCountRange.Text())
						return
					}
					op.Count = n
					p.arg |= zReplyPairs
				}
				c.enqueue(p, op)
			}, renderZValues)
	}
	rank := func(name string, rev bool, summary string) *command {
		return cmd(name, 3, flagReadonly|flagFast, "2.0.0", "O(log(N))", summary,
			[]argDoc{keyArg("key"), strArg("member")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				op := engine.Op{Code: engine.OpZRank, Key: args[1], Args: args[2:3]}
				if rev {
					op.Flags = engine.ZRev
				}
				p.arg = zReplyRank
				c.enqueue(p, op)
			}, renderZValues)
	}
	return []*command{
		cmd("zadd", -4, flagWrite|flagDenyOOM|flagFast, "1.2.0", "O(log(N)) per member",
			"Add members to a sorted set or update their scores, under conditions",
			[]argDoc{keyArg("key"),
				optional(argDoc{name: "condition", typ: "oneof", subargs: []argDoc{
					{name: "nx", typ: "pure-token", token: "NX"}, {name: "xx", typ: "pure-token", token: "XX"}}}),
				optional(argDoc{name: "comparison", typ: "oneof", subargs: []argDoc{
					{name: "gt", typ: "pure-token", token: "GT"}, {name: "lt", typ: "pure-token", token: "LT"}}}),
				optional(argDoc{name: "change", typ: "pure-token", token: "CH"}),
				optional(argDoc{name: "increment", typ: "pure-token", token: "INCR"}),
				multiple(argDoc{name: "data", typ: "block", subargs: []argDoc{{name: "score", typ: "double"}, strArg("member")}})},
			func(s *Server, c *client, args [][]byte, p *pending) { runZAdd(s, c, args, p, 0) }, renderZValues),
		cmd("zincrby", 4, flagWrite|flagDenyOOM|flagFast, "1.2.0", "O(log(N))", "Add to a member's score",
			[]argDoc{keyArg("key"), {name: "increment", typ: "double"}, strArg("member")},
			func(s *Server, c *client, args [][]byte, p *pending) { runZAdd(s, c, args, p, engine.ZIncr) }, renderZValues),
		cmd("zrem", -3, flagWrite|flagFast, "1.2.0", "O(log(N)) per member", "Remove members of a sorted set",
			[]argDoc{keyArg("key"), multiple(strArg("member"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpZRem, Key: args[1], Args: args[2:]})
			}, renderCollCount),
		cmd("zcard", 2, flagReadonly|flagFast, "1.2.0", "O(1)", "The number of members of a sorted set",
			[]argDoc{keyArg("key")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpZCard, Key: args[1]})
			}, renderCollCount),
		cmd("zcount", 4, flagReadonly|flagFast, "2.0.0", "O(log(N))", "The number of members with scores in a range",
			rangeArgs("min", "max"),
			func(s *Server, c *client, args [][]byte, p *pending) {
				if !zRangeArgsOK(c, engine.ZByScore, args[2], args[3]) {
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpZRange, Key: args[1], Args: [][]byte{args[2], args[3], nil, nil},
					Flags: engine.ZByScore | engine.ZCountOnly})
			}, renderCollCount),
		cmd("zscore", 3, flagReadonly|flagFast, "1.2.0", "O(1)", "A member's score",
			[]argDoc{keyArg("key"), strArg("member")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				p.arg = zReplyOne
				c.enqueue(p, engine.Op{Code: engine.OpZScore, Key: args[1], Args: args[2:3]})
			}, renderZValues),
		cmd("zmscore", -3, flagReadonly|flagFast, "6.2.0", "O(N) members", "The scores of members (nil for absent ones)",
			[]argDoc{keyArg("key"), multiple(strArg("member"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpZScore, Key: args[1], Args: args[2:]})
			}, renderZValues),
		cmd("zrange", -4, flagReadonly, "1.2.0", "O(log(N)+M)", "A range of members by rank, score or lexical order",
			[]argDoc{keyArg("key"), strArg("start"), strArg("stop"),
				optional(argDoc{name: "sortby", typ: "oneof", subargs: []argDoc{
					{name: "byscore", typ: "pure-token", token: "BYSCORE"}, {name: "bylex", typ: "pure-token", token: "BYLEX"}}}),
				optional(argDoc{name: "rev", typ: "pure-token", token: "REV"}), limitDoc, withScores},
			func(s *Server, c *client, args [][]byte, p *pending) { runZRange(s, c, args, p, 0, false) }, renderZValues),
		byScore("zrangebyscore", false, "Members with scores in a range, lowest first"),
		byScore("zrevrangebyscore", true, "Members with scores in a range, highest first"),
		rank("zrank", false, "A member's rank, from the lowest score"),
		rank("zrevrank", true, "A member's rank, from the highest score"),
		remRange("zremrangebyscore", engine.ZByScore, "min", "max", "Remove the members with scores in a range"),
		remRange("zremrangebyrank", 0, "start", "stop", "Remove the members with ranks in a range"),
		pop("zpopmin", false, "Remove and reply the members with the lowest scores"),
		pop("zpopmax", true, "Remove and reply the members with the highest scores"),
	}
}

// runZAdd parses ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ... and
// ZINCRBY key increment member, as Redis's zaddGenericCommand (which
// serves both: ZINCRBY reads options too).
func runZAdd(s *Server, c *client, args [][]byte, p *pending, flags uint32) {
	i := 2
	opts := map[string]uint32{"nx": engine.ZNX, "xx": engine.ZXX, "ch": engine.ZCH, "incr": engine.ZIncr, "gt": engine.ZGT, "lt": engine.ZLT}
	for ; i < len(args); i++ {
		f, ok := opts[strings.ToLower(string(args[i]))]
		if !ok {
			break
		}
		flags |= f
	}
	elems := len(args) - i
	switch {
	case elems%2 != 0 || elems == 0:
		c.local.Error(msgSyntax.Text())
		return
	case flags&engine.ZNX != 0 && flags&engine.ZXX != 0:
		c.local.Error(msgZAddXXNX.Text())
		return
	case flags&engine.ZNX != 0 && flags&(engine.ZGT|engine.ZLT) != 0 || flags&engine.ZGT != 0 && flags&engine.ZLT != 0:
		c.local.Error(msgZAddGTLTNX.Text())
		return
	case flags&engine.ZIncr != 0 && elems > 2:
		c.local.Error(msgZAddIncrPair.Text())
		return
	}
	for j := i; j < len(args); j += 2 {
		if _, ok := engine.ParseScore(args[j]); !ok {
			c.local.Error(notFloatText())
			return
		}
	}
	p.arg = zReplyCount
	if flags&engine.ZIncr != 0 {
		p.arg = zReplyDouble
	}
	members := make([][]byte, 0, elems/2)
	for j := i + 1; j < len(args); j += 2 {
		members = append(members, args[j])
	}
	if s.checkKey(c, args[1]) && s.checkElems(c, members) {
		c.enqueue(p, engine.Op{Code: engine.OpZAdd, Key: args[1], Args: args[i:], Flags: flags})
	}
}

// zRangeArgsOK checks a range's bounds as the engine will read them,
// replying Redis's error when they do not parse.
func zRangeArgsOK(c *client, flags uint32, a, b []byte) bool {
	switch {
	case flags&engine.ZByScore != 0:
		_, ok1 := engine.ParseScoreBound(a)
		_, ok2 := engine.ParseScoreBound(b)
		if !ok1 || !ok2 {
			c.local.Error(msgMinMaxFloat.Text())
			return false
		}
	case flags&engine.ZByLex != 0:
		_, ok1 := engine.ParseLexBound(a)
		_, ok2 := engine.ParseLexBound(b)
		if !ok1 || !ok2 {
			c.local.Error(msgMinMaxLex.Text())
			return false
		}
	default:
		_, ok1 := engine.ParseInt(a)
		_, ok2 := engine.ParseInt(b)
		if !ok1 || !ok2 {
			c.local.Error(msgNotInteger.Text())
			return false
		}
	}
	return true
}

// runZRange parses ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT o c]
// [WITHSCORES], and ZRANGEBYSCORE/ZREVRANGEBYSCORE (fixed true: their
// kind and direction are given), as Redis's zrangeGenericCommand.
func runZRange(s *Server, c *client, args [][]byte, p *pending, flags uint32, fixed bool) {
	var offset, count []byte
	limit := false
	for j := 4; j < len(args); j++ {
		a := strings.ToLower(string(args[j]))
		left := len(args) - j - 1
		switch {
		case a == "withscores":
			flags |= engine.ZWithScores
		case a == "limit" && left >= 2:
			o, ok1 := engine.ParseInt(args[j+1])
			n, ok2 := engine.ParseInt(args[j+2])
			if !ok1 || !ok2 {
				c.local.Error(msgNotInteger.Text())
				return
			}
			offset, count = args[j+1], args[j+2]
			limit = n != -1 || o != 0
			flags |= engine.ZLimit
			if n == -1 && o == 0 {
				flags &^= engine.ZLimit // Redis's "no limit"
			}
			j += 2
		case !fixed && flags&engine.ZRev == 0 && a == "rev":
			flags |= engine.ZRev
		case !fixed && flags&(engine.ZByScore|engine.ZByLex) == 0 && a == "bylex":
			flags |= engine.ZByLex
		case !fixed && flags&(engine.ZByScore|engine.ZByLex) == 0 && a == "byscore":
			flags |= engine.ZByScore
		default:
			c.local.Error(msgSyntax.Text())
			return
		}
	}
	byRank := flags&(engine.ZByScore|engine.ZByLex) == 0
	if limit && byRank && count != nil && string(count) != "-1" {
		c.local.Error(msgLimitNeedsBy.Text())
		return
	}
	if flags&engine.ZWithScores != 0 && flags&engine.ZByLex != 0 {
		c.local.Error(msgWithScoresLex.Text())
		return
	}
	if byRank {
		flags &^= engine.ZLimit
	}
	a, b := args[2], args[3]
	if flags&engine.ZRev != 0 && !byRank {
		a, b = b, a
	}
	if !zRangeArgsOK(c, flags, a, b) {
		return
	}
	if flags&engine.ZWithScores != 0 {
		p.arg = zReplyScores | zReplyPairs
	}
	if offset == nil {
		offset, count = []byte("0"), []byte("-1")
	}
	c.enqueue(p, engine.Op{Code: engine.OpZRange, Key: args[1], Args: [][]byte{args[2], args[3], offset, count}, Flags: flags})
}

// renderZValues replies a sorted set op's list: members (with scores:
// flat in RESP2, pairs in RESP3 where Redis nests them), scores, a rank.
func renderZValues(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	if res.Err != nil {
		r.Error(errorText(res.Err))
		return
	}
	switch {
	case p.arg&zReplyCount != 0:
		r.Int(res.Count)
		return
	case p.arg&zReplyDouble != 0:
		if res.Kind == engine.KindNone {
			r.Null()
		} else {
			r.Double(res.Value)
		}
		return
	case p.arg&zReplyRank != 0:
		if res.Kind == engine.KindNone {
			r.Null()
		} else {
			r.Int(res.Count)
		}
		return
	case p.arg&zReplyOne != 0:
		if len(res.Values) == 0 || res.Values[0] == nil {
			r.Null()
		} else {
			r.Double(res.Values[0])
		}
		return
	case p.arg&zReplyScores != 0:
		n := len(res.Values) / 2
		if r.proto == 3 && p.arg&zReplyPairs != 0 {
			r.Array(n)
			for i := 0; i < n; i++ {
				r.Array(2)
				r.Bulk(res.Values[2*i])
				r.Double(res.Values[2*i+1])
			}
			return
		}
		r.Array(2 * n)
		for i := 0; i < n; i++ {
			r.Bulk(res.Values[2*i])
			r.Double(res.Values[2*i+1])
		}
		return
	}
	r.Array(len(res.Values))
	for _, v := range res.Values {
		switch {
		case v == nil:
			r.Null()
		case p.cmd.name == "zmscore":
			r.Double(v)
		default:
			r.Bulk(v)
		}
	}
}
