package resp

import "github.com/sluice-rl/sluice/engine"

// The Redis list commands (SPEC section 15, docs/commands.md "Lists"),
// without the blocking ones: parsed and answered as redis-server 7.0 does
// (t_list.c), byte for byte. The engine keeps the lists (engine/lists.go).

// pending.arg values of the list renders.
const (
	listReplyOK    = 1 // LTRIM, LSET: +OK
	listReplyOne   = 2 // LPOP without a count, LINDEX: one element or nil
	listReplyCount = 3 // LPOP with a count: an array, a null array when absent
)

func listCommands() []*command {
	cmd := func(name string, arity int, flags cmdFlags, since, complexity, summary string, args []argDoc,
		run func(s *Server, c *client, args [][]byte, p *pending), render func(s *Server, r *replyBuf, p *pending, results []engine.Result)) *command {
		return &command{name: name, arity: arity, flags: flags, firstKey: 1, lastKey: 1, keyStep: 1, group: "list",
			since: since, complexity: complexity, summary: summary, args: args, run: run, render: render}
	}
	push := func(name string, flags uint32, since, summary string) *command {
		return cmd(name, -3, flagWrite|flagDenyOOM|flagFast, since, "O(N) elements", summary,
			[]argDoc{keyArg("key"), multiple(strArg("element"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				if s.checkKey(c, args[1]) && s.checkElems(c, args[2:]) {
					c.enqueue(p, engine.Op{Code: engine.OpLPush, Key: args[1], Args: args[2:], Flags: flags})
				}
			}, renderCollCount)
	}
	pop := func(name string, flags uint32, summary string) *command {
		return cmd(name, -2, flagWrite|flagFast, "1.0.0", "O(N) elements", summary,
			[]argDoc{keyArg("key"), optional(intArg("count"))},
			func(s *Server, c *client, args [][]byte, p *pending) {
				if len(args) > 3 {
					c.local.Error(msgArity.Text(p.cmd.name))
					return
				}
				op := engine.Op{Code: engine.OpLPop, Key: args[1], Flags: flags, Count: 1}
				p.arg = listReplyOne
				if len(args) == 3 {
					n, ok := engine.ParseInt(args[2])
					if !ok || n < 0 {
						c.local.Error(msgCountRange.Text())
						return
					}
					op.Count = n
					p.arg = listReplyCount
				}
				c.enqueue(p, op)
			}, renderList)
	}
	startStop := func(c *client, args [][]byte) bool {
		_, ok1 := engine.ParseInt(args[2])
		_, ok2 := engine.ParseInt(args[3])
		if !ok1 || !ok2 {
			c.local.Error(msgNotInteger.Text())
			return false
		}
		return true
	}
	return []*command{
		push("lpush", 0, "1.0.0", "Push elements at a list's head (the last one first)"),
		push("rpush", engine.ListRight, "1.0.0", "Push elements at a list's tail"),
		push("lpushx", engine.ListX, "2.2.0", "Push elements at the head of an existing list"),
		push("rpushx", engine.ListRight|engine.ListX, "2.2.0", "Push elements at the tail of an existing list"),
		pop("lpop", 0, "Remove and reply elements from a list's head"),
		pop("rpop", engine.ListRight, "Remove and reply elements from a list's tail"),
		cmd("llen", 2, flagReadonly|flagFast, "1.0.0", "O(1)", "The length of a list",
			[]argDoc{keyArg("key")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpLLen, Key: args[1]})
			}, renderCollCount),
		cmd("lindex", 3, flagReadonly, "1.0.0", "O(1)", "The element at an index (negative from the tail)",
			[]argDoc{keyArg("key"), intArg("index")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				p.arg = listReplyOne
				// The index is checked by the engine once it found the
				// list, as Redis looks the key up first.
				c.enqueue(p, engine.Op{Code: engine.OpLIndex, Key: args[1], Args: args[2:3]})
			}, renderList),
		cmd("lrange", 4, flagReadonly, "1.0.0", "O(S+N)", "The elements from start to stop (inclusive; negative from the tail)",
			[]argDoc{keyArg("key"), intArg("start"), intArg("stop")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				if startStop(c, args) {
					c.enqueue(p, engine.Op{Code: engine.OpLRange, Key: args[1], Args: args[2:4]})
				}
			}, renderList),
		cmd("ltrim", 4, flagWrite, "1.0.0", "O(N) removed", "Keep only the elements from start to stop",
			[]argDoc{keyArg("key"), intArg("start"), intArg("stop")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				p.arg = listReplyOK
				if startStop(c, args) {
					c.enqueue(p, engine.Op{Code: engine.OpLTrim, Key: args[1], Args: args[2:4]})
				}
			}, renderList),
		cmd("lset", 4, flagWrite|flagDenyOOM, "1.0.0", "O(1)", "Set the element at an index",
			[]argDoc{keyArg("key"), intArg("index"), strArg("element")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				p.arg = listReplyOK
				if !s.checkElems(c, args[3:]) {
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpLSet, Key: args[1], Args: args[2:4]})
			}, renderList),
		cmd("lrem", 4, flagWrite, "1.0.0", "O(N)", "Remove elements equal to one (count > 0 from the head, < 0 from the tail, 0 all)",
			[]argDoc{keyArg("key"), intArg("count"), strArg("element")},
			func(s *Server, c *client, args [][]byte, p *pending) {
				if _, ok := engine.ParseInt(args[2]); !ok {
					c.local.Error(msgNotInteger.Text())
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpLRem, Key: args[1], Args: args[2:4]})
			}, renderCollCount),
	}
}

// renderList replies a list op's result.
func renderList(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	switch {
	case res.Err != nil:
		r.Error(errorText(res.Err))
	case p.arg == listReplyOK:
		r.OK()
	case p.arg == listReplyOne && res.Kind == engine.KindNone:
		r.Null()
	case p.arg == listReplyOne && res.Values != nil:
		r.Bulk(res.Values[0]) // LPOP
	case p.arg == listReplyOne:
		r.Bulk(res.Value) // LINDEX
	case p.arg == listReplyCount && res.Kind == engine.KindNone:
		r.NullArray()
	default:
		r.Array(len(res.Values))
		for _, v := range res.Values {
			r.Bulk(v)
		}
	}
}
