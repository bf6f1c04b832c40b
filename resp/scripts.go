package resp

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/script"
	"github.com/sluice-rl/sluice/internal/slots"
)

// Scripts (SPEC section 14): EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT,
// and RENAME/RENAMENX, which the limiters' scripts use. A script is one
// engine op (engine.OpEval, OpEvalSha) that every replica applies: the
// engine hands it to a ScriptRunner (the engine.ScriptRunner below),
// which runs the Lua (internal/script) and executes each redis.call
// through this package's command table with a connection of its own,
// exactly as Redis's scripting calls commands with a fake client: the
// command's run enqueues its ops, the script's tx applies them at the
// entry's time, and the command's render writes the reply the script
// reads. Every reply and error inside a script is therefore the
// command's, byte for byte.

// scriptCommands are the scripting commands' table rows.
func scriptCommands() []*command {
	evalDocs := []argDoc{strArg("script"), intArg("numkeys"), optional(multiple(keyArg("key"))), optional(multiple(strArg("arg")))}
	shaDocs := append([]argDoc{strArg("sha1")}, evalDocs[1:]...)
	eval := func(name, summary string, sha, ro bool) *command {
		docs := evalDocs
		if sha {
			docs = shaDocs
		}
		fl := flagNoScript | flagStale | flagNoMandatoryKeys | flagMovableKeys
		if ro {
			fl |= flagReadonly
		}
		return &command{
			name: name, arity: -3, flags: fl, keysOf: evalKeys,
			group: "scripting", since: map[bool]string{false: "2.6.0", true: "7.0.0"}[ro], complexity: "Depends on the script that is executed.",
			summary: summary, args: docs,
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				s.runEval(c, args, p, sha, ro)
			},
			render: renderScript,
		}
	}
	return []*command{
		eval("eval", "Executes a server-side Lua script", false, false),
		eval("evalsha", "Executes a server-side Lua script by SHA1 digest", true, false),
		eval("eval_ro", "Executes a read-only server-side Lua script", false, true),
		eval("evalsha_ro", "Executes a read-only server-side Lua script by SHA1 digest", true, true),
		{
			name: "script", arity: -2, group: "scripting", since: "2.6.0", complexity: "Depends on subcommand.",
			summary: "A container for Lua scripts management commands", run: runSubcommand,
			subs: []*command{
				{
					name: "script|load", arity: 3, flags: flagNoScript | flagStale, group: "scripting", since: "2.6.0",
					complexity: "O(N) with N being the length in bytes of the script body.",
					summary:    "Loads a server-side Lua script to the script cache", args: []argDoc{strArg("script")},
					run: func(s *Server, c *client, args [][]byte, p *pending) {
						if msg := s.scriptCompile(args[1]); msg != "" {
							c.local.Error(msg)
							return
						}
						c.enqueue(p, engine.Op{Code: engine.OpScriptLoad, Value: args[1]})
					},
					render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
						if res := &results[0]; res.Err != nil {
							r.Error(errorText(res.Err))
						} else {
							r.Bulk(res.Value)
						}
					},
				},
				{
					name: "script|exists", arity: -3, flags: flagNoScript, group: "scripting", since: "2.6.0",
					complexity: "O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).",
					summary:    "Determines whether server-side Lua scripts exist in the script cache", args: []argDoc{multiple(strArg("sha1"))},
					run: func(s *Server, c *client, args [][]byte, p *pending) {
						c.enqueue(p, engine.Op{Code: engine.OpScriptExists, Args: args[1:]})
					},
					render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
						res := &results[0]
						if res.Err != nil {
							r.Error(errorText(res.Err))
							return
						}
						r.Array(len(res.Values))
						for _, v := range res.Values {
							if len(v) == 1 && v[0] == '1' {
								r.Int(1)
							} else {
								r.Int(0)
							}
						}
					},
				},
				{
					name: "script|flush", arity: -2, flags: flagNoScript, group: "scripting", since: "2.6.0",
					complexity: "O(N) with N being the number of scripts in cache",
					summary:    "Removes all server-side Lua scripts from the script cache",
					args: []argDoc{optional(argDoc{name: "flush-type", typ: "oneof", subargs: []argDoc{
						{name: "async", typ: "pure-token", token: "ASYNC"}, {name: "sync", typ: "pure-token", token: "SYNC"}}})},
					run: func(s *Server, c *client, args [][]byte, p *pending) {
						if len(args) > 2 || len(args) == 2 && !strings.EqualFold(string(args[1]), "sync") && !strings.EqualFold(string(args[1]), "async") {
							c.local.Error(msgScriptFlushOption.Text())
							return
						}
						c.enqueue(p, engine.Op{Code: engine.OpScriptFlush})
					},
					render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
						if res := &results[0]; res.Err != nil {
							r.Error(errorText(res.Err))
						} else {
							r.OK()
						}
					},
				},
				{
					name: "script|kill", arity: 2, flags: flagNoScript, group: "scripting", since: "2.6.0", complexity: "O(1)",
					summary: "Terminates a server-side Lua script during execution",
					run: func(s *Server, c *client, args [][]byte, p *pending) {
						// A script never runs past its budget: nothing to kill.
						c.local.Error(msgNotBusy.Text())
					},
				},
			},
		},
		{
			name: "rename", arity: 3, flags: flagWrite, firstKey: 1, lastKey: 2, keyStep: 1,
			group: "generic", since: "1.0.0", complexity: "O(1)",
			summary: "Renames a key and overwrites the destination", args: []argDoc{keyArg("key"), keyArg("newkey")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if s.checkKey(c, args[2]) {
					c.enqueue(p, engine.Op{Code: engine.OpRename, Key: args[1], Args: args[2:3]})
				}
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				if res := &results[0]; res.Err != nil {
					r.Error(errorText(res.Err))
				} else {
					r.OK()
				}
			},
		},
		{
			name: "renamenx", arity: 3, flags: flagWrite | flagFast, firstKey: 1, lastKey: 2, keyStep: 1,
			group: "generic", since: "1.0.0", complexity: "O(1)",
			summary: "Renames a key only when the target key name doesn't exist", args: []argDoc{keyArg("key"), keyArg("newkey")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if s.checkKey(c, args[2]) {
					c.enqueue(p, engine.Op{Code: engine.OpRename, Key: args[1], Args: args[2:3], Flags: engine.RenameNX})
				}
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				if res := &results[0]; res.Err != nil {
					r.Error(errorText(res.Err))
				} else {
					r.Int(res.Count)
				}
			},
		},
	}
}

// The commands Redis 7.0 flags noscript, among sluice's (COMMAND INFO
// shows the flag as Redis does), and those sluice refuses in scripts
// because their replies depend on the node rather than on the log.
var (
	redisNoScript = []string{"auth", "hello", "quit", "reset", "multi", "exec", "discard", "watch", "unwatch",
		"debug", "subscribe", "psubscribe", "unsubscribe", "punsubscribe", "ssubscribe", "sunsubscribe",
		"blpop", "brpop", "brpoplpush", "blmove", "bzpopmin", "bzpopmax", "wait", "monitor", "role"}
	nodeDependent = []string{"info", "command", "cluster", "client", "config", "rl.check", "rl.rules",
		"readonly", "readwrite", "asking", "select", "lastsave", "memory", "latency", "slowlog"}
)

// markScriptRules flags the commands refused inside scripts: Redis's
// noscript ones (their subcommands included), and the node-dependent ones
// and every RAFT.* command (notInScripts).
func markScriptRules(table map[string]*command) {
	for _, name := range redisNoScript {
		if c := table[name]; c != nil {
			c.flags |= flagNoScript
			for _, sub := range c.subs {
				sub.flags |= flagNoScript
			}
		}
	}
	for _, name := range nodeDependent {
		if c := table[name]; c != nil {
			c.notInScripts = true
		}
	}
	for name, c := range table {
		if strings.HasPrefix(name, "raft.") {
			c.notInScripts = true
		}
	}
	if c := table["client"]; c != nil {
		for _, sub := range c.subs {
			sub.flags |= flagNoScript
		}
	}
	if c := table["config"]; c != nil {
		for _, sub := range c.subs {
			if sub.name != "config|help" {
				sub.flags |= flagNoScript
			}
		}
	}
}

// evalKeys returns EVAL's keys: numkeys arguments after it (none when
// numkeys is not a valid count).
func evalKeys(args [][]byte) [][]byte {
	if len(args) < 3 {
		return nil
	}
	n, err := strconv.Atoi(string(args[2]))
	if err != nil || n <= 0 || n > len(args)-3 {
		return nil
	}
	return args[3 : 3+n]
}

// runEval parses EVAL, EVALSHA and their _RO forms and enqueues the op.
func (s *Server) runEval(c *client, args [][]byte, p *pending, sha, ro bool) {
	n, ok := engine.ParseInt(args[2])
	switch {
	case !ok:
		c.local.Error(msgNotInteger.Text())
		return
	case n < 0:
		c.local.Error(msgNumKeysNegative.Text())
		return
	case n > int64(len(args)-3):
		c.local.Error(msgNumKeysTooMany.Text())
		return
	}
	op := engine.Op{Code: engine.OpEval, Value: args[1], Args: args[3:], NumKeys: n}
	if n > 0 {
		op.Key = args[3]
	}
	if c.proto == 3 {
		op.Flags |= engine.ScriptRESP3
	}
	if ro {
		op.Flags |= engine.ScriptReadOnly
	}
	if sha {
		op.Code = engine.OpEvalSha
		if len(args[1]) != 40 {
			c.local.Error(errorText(errNoScript))
			return
		}
	} else if msg := s.scriptCompile(args[1]); msg != "" {
		c.local.Error(msg)
		return
	}
	c.enqueue(p, op)
}

// renderScript writes a script's reply, which the runner rendered.
func renderScript(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res := &results[0]
	if res.Err != nil {
		r.Error(errorText(res.Err))
		return
	}
	r.b = append(r.b, res.Value...)
}

// scriptCompile returns the compile error of a script body, or "".
func (s *Server) scriptCompile(body []byte) string {
	if s.cfg.Scripts == nil {
		return ""
	}
	if _, msg := s.cfg.Scripts.rt.Compile(body); msg != "" {
		return msg
	}
	return ""
}

// ScriptConfig configures a ScriptRunner.
type ScriptConfig struct {
	// MaxSteps and MaxMemory are the budgets of one run
	// (--script-max-steps, --script-max-memory; internal/script's
	// defaults when 0).
	MaxSteps  int64
	MaxMemory int64
	// MaxKeyLen, MaxLogLimit and MaxValueLen are the server's (Config's)
	// bounds, which the commands a script calls check.
	MaxKeyLen   int
	MaxLogLimit int64
	MaxValueLen int
	// Groups is the number of Raft groups (slot ranges) of the node, and
	// Group the one whose engine this runner serves: a script may touch
	// an undeclared key only in its own group. 0 and 0 for one group.
	Groups int
	Group  int
	// Logger receives redis.log's messages (default slog.Default()).
	Logger *slog.Logger
	// NoNative runs every script in the interpreter, even those run
	// natively when recognised by their SHA1 (scripts_native.go;
	// --script-native false).
	NoNative bool
}

// ScriptRunner runs scripts for an engine (engine.Config.Scripts): give
// each engine its own (several groups: Group differs) and the server
// (Config.Scripts) any of them, for its compile checks and statistics.
type ScriptRunner struct {
	rt        *script.Runtime
	srv       *Server    // the command table, with no executor or listener
	native    nativeCmds // the native scripts' commands in it (scripts_native.go)
	slotTable slots.Table
	group     int
	maxSteps  int64
	maxMemory int64
	noNative  bool

	stats *scriptStats // shared by the runners of one node (ForGroup)
	hosts *sync.Pool   // idle *scriptHost, shared likewise
}

// scriptStats are the per-script counters of a node's runners. A run
// takes no lock: it finds its script's counters in a map that is never
// written once published (by), and adds to them atomically; the first run
// of a script publishes a copy of the map with it, under mu (a bounded
// set: at most maxScriptSeries scripts).
type scriptStats struct {
	mu    sync.Mutex // serialises publishing
	by    atomic.Pointer[map[string]*scriptStat]
	descs [3]*prometheus.Desc
}

// maxScriptSeries bounds the per-script metrics' series.
const maxScriptSeries = 1000

// scriptStat is one script's counters (metrics).
type scriptStat struct {
	calls, errors, native atomic.Int64
	nanos                 atomic.Int64 // time in the apply
}

// lookup returns the counters of the script whose SHA1 begins with sha
// (8 hex digits), published at its first run; nil once the set is full.
func (s *scriptStats) lookup(sha string) *scriptStat {
	if st := (*s.by.Load())[sha]; st != nil {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.by.Load()
	if st := old[sha]; st != nil {
		return st
	}
	if len(old) >= maxScriptSeries {
		return nil
	}
	by := make(map[string]*scriptStat, len(old)+1)
	for k, v := range old {
		by[k] = v
	}
	st := &scriptStat{}
	by[strings.Clone(sha)] = st
	s.by.Store(&by)
	return st
}

// NewScriptRunner returns a runner.
func NewScriptRunner(cfg ScriptConfig) *ScriptRunner {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger
	steps, memory := cfg.MaxSteps, cfg.MaxMemory
	if steps <= 0 {
		steps = script.DefaultMaxSteps
	}
	if memory <= 0 {
		memory = script.DefaultMaxMemory
	}
	texts := script.Texts{
		Compile:   msgScriptCompile.Text(""),
		Steps:     msgScriptSteps.Text(strconv.FormatInt(steps, 10)),
		Memory:    msgScriptMemory.Text(strconv.FormatInt(memory, 10)),
		Nesting:   msgScriptNesting.Text(),
		NoArgs:    msgScriptNoArgs.Text(),
		BadArg:    msgScriptBadArg.Text(),
		ReadOnly:  msgScriptReadOnlyTable.Text(),
		NoGlobal:  msgScriptNoGlobal.Text("%s"),
		WrongArgs: msgScriptWrongArgs.Text(),
		BadResp:   msgScriptBadResp.Text(),
		Format:    msgScriptFormat.Text(),
	}
	rt := script.New(script.Config{MaxSteps: steps, MaxMemory: memory, Log: func(level int, m string) {
		lv := [...]slog.Level{slog.LevelDebug, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn}[level]
		log.Log(nil, lv, "redis.log", "msg", m)
	}}, texts)
	srv := NewServer(Config{MaxKeyLen: cfg.MaxKeyLen, MaxLogLimit: cfg.MaxLogLimit, MaxValueLen: cfg.MaxValueLen, Logger: cfg.Logger}, nil)
	st := &scriptStats{}
	st.by.Store(&map[string]*scriptStat{})
	for i, d := range [3][2]string{
		{"sluice_script_calls_total", "Script runs (EVAL, EVALSHA), by the first 8 hex digits of the script's SHA1."},
		{"sluice_script_errors_total", "Script runs that replied an error (a budget, a runtime error, an error reply), by SHA1 prefix."},
		{"sluice_script_apply_seconds_total", "Time spent running scripts in the apply, by SHA1 prefix (every replica runs every script)."},
	} {
		st.descs[i] = prometheus.NewDesc(d[0], d[1], []string{"sha"}, nil)
	}
	r := &ScriptRunner{rt: rt, srv: srv, native: nativeCommands(srv), group: cfg.Group, maxSteps: steps, maxMemory: memory, noNative: cfg.NoNative, stats: st, hosts: &sync.Pool{}}
	var err error
	if r.slotTable, err = slots.Even(max(cfg.Groups, 1)); err != nil {
		r.slotTable, _ = slots.Even(1)
	}
	return r
}

// RunScript implements engine.ScriptRunner.
func (r *ScriptRunner) RunScript(tx *engine.ScriptTx) []byte {
	start := time.Now()
	args := tx.Args()
	n := tx.NumKeys()
	proto := 2
	if tx.Flags()&engine.ScriptRESP3 != 0 {
		proto = 3
	}
	h, _ := r.hosts.Get().(*scriptHost)
	if h == nil {
		h = &scriptHost{names: nativeNames{get: []byte("get"), setex: []byte("setex"), time: []byte("TIME"), set: []byte("SET"), ex: []byte("EX")}}
		h.c.authed = true
	}
	// The pool is shared by every group's runner (ForGroup): a host may
	// come from another group's run, so it takes this runner (its group
	// decides which keys are local).
	h.r, h.tx, h.ro = r, tx, tx.Flags()&engine.ScriptReadOnly != 0
	if reply, ok := r.runNative(tx, h); ok {
		h.tx = nil
		r.hosts.Put(h)
		r.count(tx.SHA(), true, false, time.Since(start))
		return reply
	}
	reply, out := r.rt.Run(tx.SHA(), tx.Body(), args[:n], args[n:], proto, h)
	h.tx = nil
	r.hosts.Put(h)
	if out == script.OutOfSteps || out == script.OutOfMemory {
		tx.Abort()
	}
	r.count(tx.SHA(), false, out != script.Done || len(reply) > 0 && reply[0] == '-', time.Since(start))
	return reply
}

// ForGroup returns a runner for the engine of group g that shares r's
// Lua states, compiled scripts and statistics.
func (r *ScriptRunner) ForGroup(g int) *ScriptRunner {
	c := *r
	c.group = g
	return &c
}

func (r *ScriptRunner) count(sha string, native, failed bool, d time.Duration) {
	if len(sha) > 8 {
		sha = sha[:8]
	}
	st := r.stats.lookup(sha)
	if st == nil {
		return // a bounded set of series
	}
	st.calls.Add(1)
	if native {
		st.native.Add(1)
	}
	if failed {
		st.errors.Add(1)
	}
	st.nanos.Add(int64(d))
}

// Describe implements prometheus.Collector: the per-script metrics.
func (r *ScriptRunner) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range r.stats.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (r *ScriptRunner) Collect(ch chan<- prometheus.Metric) {
	s := r.stats
	for sha, st := range *s.by.Load() {
		ch <- prometheus.MustNewConstMetric(s.descs[0], prometheus.CounterValue, float64(st.calls.Load()), sha)
		ch <- prometheus.MustNewConstMetric(s.descs[1], prometheus.CounterValue, float64(st.errors.Load()), sha)
		ch <- prometheus.MustNewConstMetric(s.descs[2], prometheus.CounterValue, time.Duration(st.nanos.Load()).Seconds(), sha)
	}
}

// scriptHost runs a script's commands (script.Host).
type scriptHost struct {
	// The native scripts' (scripts_native.go) reused buffers.
	names                  nativeNames
	argv                   [][]byte
	nowArg, ttlArg, valArg []byte

	r   *ScriptRunner
	tx  *engine.ScriptTx
	ro  bool
	c   client
	res []engine.Result
	out replyBuf
	// p is the nested command's pending, reused: a local one escapes
	// (dispatch and render take its address), an allocation per call.
	p pending
}

// Call implements script.Host.
func (h *scriptHost) Call(args [][]byte, proto int) []byte {
	return h.callCmd(h.r.srv.lookup(args[0]), args, proto)
}

// callCmd is Call of args with their command already looked up (nil:
// unknown).
func (h *scriptHost) callCmd(cmd *command, args [][]byte, proto int) (out []byte) {
	srv := h.r.srv
	if cmd == nil {
		return errLine(msgScriptUnknownCommand.Text())
	}
	if !cmd.arityOK(len(args)) {
		return errLine(msgScriptArity.Text())
	}
	eff := cmd
	if len(cmd.subs) > 0 && len(args) > 1 {
		for _, sub := range cmd.subs {
			if sub.name == cmd.name+"|"+strings.ToLower(string(args[1])) {
				eff = sub
			}
		}
	}
	if eff.flags.has(flagNoScript) || cmd.flags.has(flagNoScript) || cmd.notInScripts {
		return errLine(msgScriptNotAllowed.Text())
	}
	if h.ro && (eff.flags.has(flagWrite) || cmd.flags.has(flagWrite)) {
		return errLine(msgScriptReadOnly.Text())
	}
	if h.r.slotTable.Groups() > 1 {
		for _, k := range cmd.keys(args) {
			if h.r.slotTable.Group(slots.Of(k)) != h.r.group {
				return errLine(msgScriptNonLocal.Text())
			}
		}
	}
	c := &h.c
	c.proto = proto
	c.ops, c.limits, c.each, c.local.b = c.ops[:0], c.limits[:0], c.each[:0], c.local.b[:0]
	c.pending = c.pending[:0]
	h.p = pending{}
	p := &h.p
	defer func() {
		*p = pending{} // pins nothing between calls
		// A command's bug must not take the node down inside the apply.
		if rec := recover(); rec != nil {
			srv.cfg.Logger.Error("a command inside a script panicked", "command", string(args[0]), "panic", fmt.Sprint(rec))
			out = errLine(msgScriptNotAllowed.Text())
		}
	}()
	srv.dispatchCmd(c, cmd, args, p)
	if !p.deferred {
		return c.local.b[p.localStart:p.localEnd] // read by the caller before the next call
	}
	ops := c.ops[p.opStart:p.opEnd]
	if cap(h.res) < len(ops) {
		h.res = make([]engine.Result, len(ops))
	}
	res := h.res[:len(ops)]
	clear(res)
	h.tx.Apply(ops, res)
	h.out.proto, h.out.b = proto, h.out.b[:0]
	p.cmd.render(srv, &h.out, p, res)
	return h.out.b // read by the caller before the next call
}

// errLine is an error reply's bytes.
func errLine(text string) []byte {
	return append(append([]byte{'-'}, text...), '\r', '\n')
}
