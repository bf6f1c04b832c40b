package resp

import (
	"bytes"
	"math"
	"strings"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// The Redis string commands that existing limiters send (SPEC section 11,
// docs/commands.md "Redis string commands"): parsed, checked and answered
// as redis-server 7.0 does (t_string.c, expire.c), byte for byte. The
// engine keeps the values and expiries (engine/strings.go).

// pending.arg bits of the string commands' renders.
const (
	strReplyGet   = 1 << iota // SET ... GET, GETSET: reply the old value
	strReplyInt               // SETNX: reply 1 or 0
	strReplySecs              // EXPIRETIME: seconds
	strReplyNilOK             // SET without GET: OK or nil
)

// stringCommands are the string commands' table rows.
func stringCommands() []*command {
	expireDocs := []argDoc{keyArg("key"), intArg("seconds"), optional(argDoc{name: "condition", typ: "oneof", subargs: []argDoc{
		{name: "nx", typ: "pure-token", token: "NX"}, {name: "xx", typ: "pure-token", token: "XX"},
		{name: "gt", typ: "pure-token", token: "GT"}, {name: "lt", typ: "pure-token", token: "LT"}}})}
	expireCmd := func(name, arg string, unitMs, abs bool, summary string) *command {
		docs := append([]argDoc(nil), expireDocs...)
		docs[1] = intArg(arg)
		return &command{
			name: name, arity: -3, flags: flagWrite | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "generic", since: "1.0.0", complexity: "O(1)",
			summary: summary, args: docs,
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				s.runExpire(c, args, p, unitMs, abs)
			},
			render: renderStrCount,
		}
	}
	expireTime := func(name string, secs bool, summary string) *command {
		return &command{
			name: name, arity: 2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "generic", since: "7.0.0", complexity: "O(1)",
			summary: summary, args: []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if secs {
					p.arg = strReplySecs
				}
				c.enqueue(p, engine.Op{Code: engine.OpExpireTime, Key: args[1]})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				res := &results[0]
				switch {
				case res.Err != nil:
					r.Error(strErrorText(p, res.Err))
				case res.Time >= 0 && p.arg&strReplySecs != 0:
					// (ms+500)/1000 without overflowing, as Redis's
					// compiled arithmetic gives it.
					at := res.Time
					r.Int(at/1000 + (at%1000+500)/1000)
				default:
					r.Int(res.Time)
				}
			},
		}
	}
	incr := func(name string, sign int64, withArg bool, summary string) *command {
		c := &command{
			name: name, arity: 2, flags: flagWrite | flagDenyOOM | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "1.0.0", complexity: "O(1)",
			summary: summary, args: []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				d := sign
				if withArg {
					n, ok := engine.ParseInt(args[2])
					if !ok {
						c.local.Error(msgNotInteger.Text())
						return
					}
					if sign < 0 && n == math.MinInt64 {
						c.local.Error(msgDecrOverflow.Text())
						return
					}
					d = sign * n
				}
				if s.checkKey(c, args[1]) {
					c.enqueue(p, engine.Op{Code: engine.OpIncrBy, Key: args[1], Delta: d})
				}
			},
			render: renderStrCount,
		}
		if withArg {
			c.arity = 3
			arg := "increment"
			if sign < 0 {
				arg = "decrement"
			}
			c.args = append(c.args, intArg(arg))
		}
		return c
	}
	expiryDocs := optional(argDoc{name: "expiration", typ: "oneof", subargs: []argDoc{
		tokenArg("EX", "seconds", "integer"), tokenArg("PX", "milliseconds", "integer"),
		tokenArg("EXAT", "unix-time-seconds", "integer"), tokenArg("PXAT", "unix-time-milliseconds", "integer"),
		{name: "keepttl", typ: "pure-token", token: "KEEPTTL"}}})
	getexDocs := optional(argDoc{name: "expiration", typ: "oneof", subargs: []argDoc{
		tokenArg("EX", "seconds", "integer"), tokenArg("PX", "milliseconds", "integer"),
		tokenArg("EXAT", "unix-time-seconds", "integer"), tokenArg("PXAT", "unix-time-milliseconds", "integer"),
		{name: "persist", typ: "pure-token", token: "PERSIST"}}})
	return []*command{
		{
			name: "get", arity: 2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "1.0.0", complexity: "O(1)",
			summary: "Get the value of a string key", args: []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpGet, Key: args[1]})
			},
			render: renderStrValue,
		},
		{
			name: "set", arity: -3, flags: flagWrite | flagDenyOOM,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "1.0.0", complexity: "O(1)",
			summary: "Set a string key's value, with an optional expiry and conditions",
			args: []argDoc{keyArg("key"), strArg("value"),
				optional(argDoc{name: "condition", typ: "oneof", subargs: []argDoc{
					{name: "nx", typ: "pure-token", token: "NX"}, {name: "xx", typ: "pure-token", token: "XX"}}}),
				optional(argDoc{name: "get", typ: "pure-token", token: "GET"}), expiryDocs},
			run:    runSet,
			render: renderSet,
		},
		{
			name: "setnx", arity: 3, flags: flagWrite | flagDenyOOM | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "1.0.0", complexity: "O(1)",
			summary: "Set a string key's value only if the key does not exist", args: []argDoc{keyArg("key"), strArg("value")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				p.arg = strReplyInt
				s.enqueueSet(c, p, args[1], args[2], engine.StrNX, 0)
			},
			render: renderSet,
		},
		{
			name: "setex", arity: 4, flags: flagWrite | flagDenyOOM,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "2.0.0", complexity: "O(1)",
			summary: "Set a string key's value and its expiry in seconds", args: []argDoc{keyArg("key"), intArg("seconds"), strArg("value")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				runSetEx(s, c, args, p, false)
			},
			render: renderSet,
		},
		{
			name: "psetex", arity: 4, flags: flagWrite | flagDenyOOM,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "2.6.0", complexity: "O(1)",
			summary: "Set a string key's value and its expiry in milliseconds", args: []argDoc{keyArg("key"), intArg("milliseconds"), strArg("value")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				runSetEx(s, c, args, p, true)
			},
			render: renderSet,
		},
		{
			name: "getset", arity: 3, flags: flagWrite | flagDenyOOM | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "1.0.0", complexity: "O(1)",
			summary: "Set a string key's value and reply its old value", args: []argDoc{keyArg("key"), strArg("value")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				p.arg = strReplyGet
				s.enqueueSet(c, p, args[1], args[2], engine.StrGet, 0)
			},
			render: renderSet,
		},
		{
			name: "getdel", arity: 2, flags: flagWrite | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "6.2.0", complexity: "O(1)",
			summary: "Get a string key's value and delete the key", args: []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpGetDel, Key: args[1]})
			},
			render: renderStrValue,
		},
		{
			name: "getex", arity: -2, flags: flagWrite | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "6.2.0", complexity: "O(1)",
			summary: "Get a string key's value and set or remove its expiry", args: []argDoc{keyArg("key"), getexDocs},
			run:    runGetEx,
			render: renderStrValue,
		},
		{
			name: "mget", arity: -2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: -1, keyStep: 1, group: "string", since: "1.0.0", complexity: "O(N) keys",
			summary: "Get the values of several keys (nil for those that hold no string)", args: []argDoc{multiple(keyArg("key"))},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				for _, k := range args[1:] {
					c.enqueue(p, engine.Op{Code: engine.OpGet, Key: k})
				}
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				for i := range results {
					if results[i].Err != nil {
						r.Error(strErrorText(p, results[i].Err))
						return
					}
				}
				r.Array(len(results))
				for i := range results {
					if results[i].Kind == engine.KindString {
						r.Bulk(results[i].Value)
					} else {
						r.Null()
					}
				}
			},
		},
		{
			name: "strlen", arity: 2, flags: flagReadonly | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "2.2.0", complexity: "O(1)",
			summary: "The length of a string key's value", args: []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpStrlen, Key: args[1]})
			},
			render: renderStrCount,
		},
		incr("incr", 1, false, "Add one to a string key's integer"),
		incr("decr", -1, false, "Subtract one from a string key's integer"),
		incr("incrby", 1, true, "Add an integer to a string key's integer"),
		incr("decrby", -1, true, "Subtract an integer from a string key's integer"),
		expireCmd("expire", "seconds", false, false, "Set a string key's expiry in seconds"),
		expireCmd("pexpire", "milliseconds", true, false, "Set a string key's expiry in milliseconds"),
		expireCmd("expireat", "unix-time-seconds", false, true, "Set a string key's expiry as a Unix time in seconds"),
		expireCmd("pexpireat", "unix-time-milliseconds", true, true, "Set a string key's expiry as a Unix time in milliseconds"),
		{
			name: "persist", arity: 2, flags: flagWrite | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "generic", since: "2.2.0", complexity: "O(1)",
			summary: "Remove a string key's expiry", args: []argDoc{keyArg("key")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpPersist, Key: args[1]})
			},
			render: renderStrCount,
		},
		{
			name: "incrbyfloat", arity: 3, flags: flagWrite | flagDenyOOM | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "string", since: "2.6.0", complexity: "O(1)",
			summary: "Add a float to the number held at a string key (64-bit floats)",
			args:    []argDoc{keyArg("key"), argDoc{name: "increment", typ: "double"}},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				// The engine checks the increment, after the key's type,
				// as Redis does (WRONGTYPE first).
				if s.checkKey(c, args[1]) {
					c.enqueue(p, engine.Op{Code: engine.OpIncrByFloat, Key: args[1], Value: args[2]})
				}
			},
			render: renderStrValue,
		},
		expireTime("expiretime", true, "A string key's expiry as a Unix time in seconds; -1 without one, -2 if absent"),
		expireTime("pexpiretime", false, "A string key's expiry as a Unix time in milliseconds; -1 without one, -2 if absent"),
	}
}

// strErrorText renders an error of a string command: Redis's "invalid
// expire time" names the command.
func strErrorText(p *pending, err error) string {
	if e := errcode.Of(err); e != nil && e.Code == errcode.BadExpire && p.cmd != nil {
		return badExpireText(p.cmd.name)
	}
	return errorText(err)
}

// renderStrValue replies a value: nil when absent, Redis's WRONGTYPE when
// the key is a limiter.
func renderStrValue(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	switch {
	case res.Err != nil:
		r.Error(strErrorText(p, res.Err))
	case res.Kind == engine.KindString:
		r.Bulk(res.Value)
	case res.Kind != engine.KindNone:
		r.Error(errcode.WrongTypeValue.Entry().Reply)
	default:
		r.Null()
	}
}

// renderStrCount replies the result's count as an integer.
func renderStrCount(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	if err := results[0].Err; err != nil {
		r.Error(strErrorText(p, err))
		return
	}
	r.Int(results[0].Count)
}

// renderSet replies SET's OK or nil, SET GET's and GETSET's old value,
// SETNX's 1 or 0.
func renderSet(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	switch {
	case res.Err != nil:
		r.Error(strErrorText(p, res.Err))
	case p.arg&strReplyGet != 0 && res.Kind == engine.KindString:
		r.Bulk(res.Value)
	case p.arg&strReplyGet != 0:
		r.Null()
	case p.arg&strReplyInt != 0:
		r.Int(res.Count)
	case res.Count == 1:
		r.OK()
	default:
		r.Null()
	}
}

// enqueueSet checks the key and value and enqueues an OpSet.
func (s *Server) enqueueSet(c *client, p *pending, key, val []byte, flags uint32, expire int64) {
	if !s.checkKey(c, key) {
		return
	}
	if len(val) > s.cfg.MaxValueLen {
		c.local.Error(valueTooLongText(s.cfg.MaxValueLen))
		return
	}
	c.enqueue(p, engine.Op{Code: engine.OpSet, Key: key, Value: val, Flags: flags, Expire: expire})
}

func valueTooLongText(n int) string {
	return codeText(&errcode.Error{Code: errcode.ValueTooLong, Num: int64(n)})
}

// Option bits of parseStringOptions (Redis's OBJ_* flags).
const (
	optNX = 1 << iota
	optXX
	optEX
	optPX
	optKeepTTL
	optGet
	optEXAT
	optPXAT
	optPersist
)

// parseStringOptions parses SET's (forSet) or GETEX's options exactly as
// Redis's parseExtendedStringArgumentsOrReply does: it returns the option
// bits and the expiry argument, or ok false on Redis's syntax error.
func parseStringOptions(args [][]byte, forSet bool) (flags int, expire []byte, ok bool) {
	j := 2
	if forSet {
		j = 3
	}
	is := func(opt []byte, name string) bool { return strings.EqualFold(string(opt), name) }
	for ; j < len(args); j++ {
		opt := args[j]
		var next []byte
		if j < len(args)-1 {
			next = args[j+1]
		}
		hasNext := j < len(args)-1
		exp := flags&(optEX|optPX|optEXAT|optPXAT) != 0
		switch {
		case is(opt, "nx") && flags&optXX == 0 && forSet:
			flags |= optNX
		case is(opt, "xx") && flags&optNX == 0 && forSet:
			flags |= optXX
		case is(opt, "get") && forSet:
			flags |= optGet
		case is(opt, "keepttl") && flags&optPersist == 0 && !exp && forSet:
			flags |= optKeepTTL
		case is(opt, "persist") && !forSet && !exp && flags&optKeepTTL == 0:
			flags |= optPersist
		case is(opt, "ex") && flags&(optKeepTTL|optPersist|optEXAT|optPX|optPXAT) == 0 && hasNext:
			flags |= optEX
			expire = next
			j++
		case is(opt, "px") && flags&(optKeepTTL|optPersist|optEX|optEXAT|optPXAT) == 0 && hasNext:
			flags |= optPX
			expire = next
			j++
		case is(opt, "exat") && flags&(optKeepTTL|optPersist|optEX|optPX|optPXAT) == 0 && hasNext:
			flags |= optEXAT
			expire = next
			j++
		case is(opt, "pxat") && flags&(optKeepTTL|optPersist|optEX|optEXAT|optPX) == 0 && hasNext:
			flags |= optPXAT
			expire = next
			j++
		default:
			return 0, nil, false
		}
	}
	return flags, expire, true
}

// expireArg checks an expiry argument as Redis's
// getExpireMillisecondsOrReply does before it adds the time: an integer,
// positive, and in seconds not beyond what milliseconds hold. It returns
// the milliseconds and the engine flag (relative or absolute), or the
// error: msgNotInteger, or "" with bad true for an invalid expire time.
func expireArg(flags int, arg []byte) (ms int64, eflag uint32, notInt, bad bool) {
	ms, ok := engine.ParseInt(arg)
	if !ok {
		return 0, 0, true, false
	}
	secs := flags&(optEX|optEXAT) != 0
	if ms <= 0 || secs && ms > math.MaxInt64/1000 {
		return 0, 0, false, true
	}
	if secs {
		ms *= 1000
	}
	if flags&(optEX|optPX) != 0 {
		return ms, engine.StrExpireRel, false, false
	}
	return ms, engine.StrExpireAbs, false, false
}

func badExpireText(name string) string {
	return codeText(&errcode.Error{Code: errcode.BadExpire, Detail: name})
}

// runSet parses SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT t|KEEPTTL].
func runSet(s *Server, c *client, args [][]byte, p *pending) {
	flags, expire, ok := parseStringOptions(args, true)
	if !ok {
		c.local.Error(msgSyntax.Text())
		return
	}
	var ef uint32
	var ms int64
	if expire != nil {
		var notInt, bad bool
		ms, ef, notInt, bad = expireArg(flags, expire)
		switch {
		case notInt:
			c.local.Error(msgNotInteger.Text())
			return
		case bad:
			c.local.Error(badExpireText("set"))
			return
		}
	}
	if flags&optNX != 0 {
		ef |= engine.StrNX
	}
	if flags&optXX != 0 {
		ef |= engine.StrXX
	}
	if flags&optKeepTTL != 0 {
		ef |= engine.StrKeepTTL
	}
	if flags&optGet != 0 {
		ef |= engine.StrGet
		p.arg = strReplyGet
	}
	s.enqueueSet(c, p, args[1], args[2], ef, ms)
}

// runSetEx parses SETEX key seconds value and PSETEX key ms value.
func runSetEx(s *Server, c *client, args [][]byte, p *pending, millis bool) {
	flags := optEX
	if millis {
		flags = optPX
	}
	ms, ef, notInt, bad := expireArg(flags, args[2])
	switch {
	case notInt:
		c.local.Error(msgNotInteger.Text())
		return
	case bad:
		c.local.Error(badExpireText(p.cmd.name))
		return
	}
	s.enqueueSet(c, p, args[1], args[3], ef, ms)
}

// runGetEx parses GETEX key [EX|PX|EXAT|PXAT t|PERSIST]. A bad expiry
// argument is reported only for an existing string key (Redis looks the key
// up first), so it travels to the engine as a flag.
func runGetEx(s *Server, c *client, args [][]byte, p *pending) {
	flags, expire, ok := parseStringOptions(args, false)
	if !ok {
		c.local.Error(msgSyntax.Text())
		return
	}
	op := engine.Op{Code: engine.OpGetEx, Key: args[1]}
	if expire != nil {
		ms, ef, notInt, bad := expireArg(flags, expire)
		switch {
		case notInt:
			op.Flags = engine.StrBadInt
		case bad:
			op.Flags = engine.StrBadExpire
		default:
			op.Flags, op.Expire = ef, ms
		}
	}
	if flags&optPersist != 0 {
		op.Flags |= engine.StrPersist
	}
	c.enqueue(p, op)
}

// runExpire parses EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT key t
// [NX|XX|GT|LT ...] as Redis's expireGenericCommand does.
func (s *Server) runExpire(c *client, args [][]byte, p *pending, unitMs, abs bool) {
	var nx, xx, gt, lt bool
	for _, opt := range args[3:] {
		switch {
		case bytes.EqualFold(opt, []byte("nx")):
			nx = true
		case bytes.EqualFold(opt, []byte("xx")):
			xx = true
		case bytes.EqualFold(opt, []byte("gt")):
			gt = true
		case bytes.EqualFold(opt, []byte("lt")):
			lt = true
		default:
			c.local.Error(msgUnsupportedOption.Text(cString(opt)))
			return
		}
	}
	if nx && (xx || gt || lt) {
		c.local.Error(msgExpireNXConflict.Text())
		return
	}
	if gt && lt {
		c.local.Error(msgExpireGTLT.Text())
		return
	}
	when, ok := engine.ParseInt(args[2])
	if !ok {
		c.local.Error(msgNotInteger.Text())
		return
	}
	if !unitMs {
		if when > math.MaxInt64/1000 || when < math.MinInt64/1000 {
			c.local.Error(badExpireText(p.cmd.name))
			return
		}
		when *= 1000
	}
	op := engine.Op{Code: engine.OpExpire, Key: args[1], Expire: when, Flags: engine.StrExpireRel}
	if abs {
		op.Flags = engine.StrExpireAbs
	}
	for _, f := range []struct {
		on   bool
		flag uint32
	}{{nx, engine.StrIfNX}, {xx, engine.StrIfXX}, {gt, engine.StrIfGT}, {lt, engine.StrIfLT}} {
		if f.on {
			op.Flags |= f.flag
		}
	}
	c.enqueue(p, op)
}

// cString is b as Redis prints an argument with %s: up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
