package resp

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/engine"
)

// maxTimewarpMillis bounds one DEBUG TIMEWARP step (the longest period)
// so that the clock stays far inside int64 nanoseconds.
const maxTimewarpMillis = engine.MaxPeriod / nsPerMs

// serverCommands are the server commands (docs/commands.md, "Server
// commands"): introspection, configuration and the test clock.
func serverCommands() []*command {
	cmdCmd := &command{
		name: "command", arity: -1, flags: flagLoading | flagStale, group: "server", since: "2.8.13",
		complexity: "O(N) commands", summary: "Describe the commands: COUNT, LIST, INFO, DOCS",
		run: func(s *Server, c *client, args [][]byte, p *pending) {
			if len(args) == 1 {
				s.writeAllCommandInfo(&c.local)
				return
			}
			runSubcommand(s, c, args, p)
		},
	}
	cmdCmd.subs = []*command{
		{name: "command|count", arity: 2, group: "server", since: "2.8.13", summary: "The number of commands",
			run: func(s *Server, c *client, args [][]byte, p *pending) { c.local.Int(int64(len(s.commands))) }},
		{name: "command|list", arity: -2, group: "server", since: "7.0.0", summary: "The names of the commands",
			run: runCommandList},
		{name: "command|info", arity: -2, group: "server", since: "2.8.13", summary: "Details of commands",
			args: []argDoc{optional(multiple(strArg("command-name")))}, run: runCommandInfo},
		{name: "command|docs", arity: -2, group: "server", since: "7.0.0", summary: "Documentation of commands",
			args: []argDoc{optional(multiple(strArg("command-name")))}, run: runCommandDocs},
		{name: "command|getkeys", arity: -4, group: "server", since: "2.8.13", summary: "The key arguments of a command",
			args: []argDoc{strArg("command"), optional(multiple(strArg("arg")))}, run: runCommandGetKeys},
	}
	config := &command{
		name: "config", arity: -2, group: "server", since: "2.0.0", complexity: "O(N)",
		summary: "CONFIG GET the settings clients probe", run: runSubcommand,
	}
	config.subs = []*command{
		{name: "config|get", arity: -3, group: "server", since: "2.0.0", summary: "Settings matching the patterns",
			args: []argDoc{multiple(argDoc{name: "parameter", typ: "pattern"})}, run: runConfigGet},
		{name: "config|set", arity: -4, group: "server", since: "2.0.0", summary: "Not supported: sluice is configured by flags",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Error(msgConfigSet.Text())
			}},
		{name: "config|resetstat", arity: 2, group: "server", since: "2.0.0", summary: "Accepted for compatibility",
			run: func(s *Server, c *client, args [][]byte, p *pending) { c.local.OK() }},
	}
	debug := &command{
		name: "debug", arity: -2, group: "server", since: "1.0.0", complexity: "O(1)",
		summary: "The test clock: TIMEWARP ms, CLOCK FREEZE [unix-ms], CLOCK RESUME; DIGEST (needs --enable-debug-command)",
		subErr:  msgDebugUsage.Text(),
		run: func(s *Server, c *client, args [][]byte, p *pending) {
			if !s.cfg.EnableDebug {
				c.local.Error(msgDebugDisabled.Text())
				return
			}
			runSubcommand(s, c, args, p)
		},
	}
	debug.subs = []*command{
		{name: "debug|timewarp", arity: 3, group: "server", since: "1.0.0", summary: "Advance the clock by ms",
			args: []argDoc{intArg("milliseconds")}, run: runDebugTimewarp, render: renderOK},
		{name: "debug|clock", arity: -3, group: "server", since: "1.0.0", summary: "FREEZE [unix-ms] or RESUME the clock",
			args: []argDoc{{name: "action", typ: "oneof", subargs: []argDoc{
				{name: "freeze", typ: "block", token: "FREEZE", subargs: []argDoc{optional(intArg("unix-time-milliseconds"))}},
				{name: "resume", typ: "pure-token", token: "RESUME"}}}},
			run: runDebugClock, render: renderOK},
		{name: "debug|digest", arity: 2, group: "server", since: "1.0.0", summary: "A hash of this replica's own state (chaos tests)",
			run: func(s *Server, c *client, args [][]byte, p *pending) { runDebugDigest(s, c) }}, // debugdigest.go
	}
	return []*command{
		{
			name: "time", arity: 1, flags: flagFast, group: "server", since: "2.6.0", complexity: "O(1)",
			summary: "The clock decisions use: unix seconds and microseconds",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.enqueue(p, engine.Op{Code: engine.OpTime})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				ns := results[0].Time
				r.Array(2)
				r.BulkInt(ns / 1e9)
				r.BulkInt(ns % 1e9 / 1e3)
			},
		},
		{
			name: "info", arity: -1, flags: flagLoading | flagStale, group: "server", since: "1.0.0",
			complexity: "O(1)", summary: "Server information by section",
			args: []argDoc{optional(multiple(strArg("section")))},
			run:  runInfo, render: renderInfo,
		},
		cmdCmd, config, debug,
	}
}

// renderOK renders the reply of a command whose one operation returns
// nothing but an error or success.
func renderOK(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	if results[0].Err != nil {
		r.Error(errorText(results[0].Err))
		return
	}
	r.OK()
}

// runDebugTimewarp implements DEBUG TIMEWARP ms (args from TIMEWARP on).
func runDebugTimewarp(s *Server, c *client, args [][]byte, p *pending) {
	ms, err := ParseInteger("milliseconds", args[1])
	if err != nil {
		c.local.Error(err.Error())
		return
	}
	if ms > maxTimewarpMillis {
		c.local.Error(NewArgError("milliseconds", args[1], "at most "+strconv.FormatInt(maxTimewarpMillis, 10)+" ("+strconv.Itoa(engine.MaxPeriodDays)+"d) per call").Error())
		return
	}
	c.enqueue(p, engine.Op{Code: engine.OpTimeWarp, Clock: ms * 1e6})
}

// runDebugClock implements DEBUG CLOCK FREEZE [unix-ms] and DEBUG CLOCK
// RESUME (args from CLOCK on).
func runDebugClock(s *Server, c *client, args [][]byte, p *pending) {
	switch {
	case strings.EqualFold(string(args[1]), "freeze") && len(args) <= 3:
		var at int64
		if len(args) == 3 {
			ms, err := ParseInteger("unix-ms", args[2])
			if err != nil {
				c.local.Error(err.Error())
				return
			}
			if ms > 9_000_000_000_000 || ms == 0 {
				c.local.Error(NewArgError("unix-ms", args[2], "must be a time from 1970 to 2255").Error())
				return
			}
			at = ms * 1e6
		}
		c.enqueue(p, engine.Op{Code: engine.OpClockFreeze, Clock: at})
	case strings.EqualFold(string(args[1]), "resume") && len(args) == 2:
		c.enqueue(p, engine.Op{Code: engine.OpClockResume})
	default:
		c.local.Error(msgDebugUsage.Text())
	}
}

// writeAllCommandInfo writes COMMAND INFO of every command, in name order.
func (s *Server) writeAllCommandInfo(r *replyBuf) {
	r.Array(len(s.commands))
	for _, name := range s.sortedNames() {
		s.writeCommandInfo(r, s.commands[name])
	}
}

// runCommandList implements COMMAND LIST.
func runCommandList(s *Server, c *client, args [][]byte, p *pending) {
	all := s.sortedNames()
	c.local.Array(len(all))
	for _, n := range all {
		c.local.BulkString(n)
	}
}

// runCommandInfo implements COMMAND INFO [name ...]: a null for an unknown
// name.
func runCommandInfo(s *Server, c *client, args [][]byte, p *pending) {
	r := &c.local
	names := args[1:]
	if len(names) == 0 {
		s.writeAllCommandInfo(r)
		return
	}
	r.Array(len(names))
	for _, n := range names {
		if cmd := s.commands[strings.ToLower(string(n))]; cmd != nil {
			s.writeCommandInfo(r, cmd)
		} else {
			r.Null()
		}
	}
}

// runCommandGetKeys implements COMMAND GETKEYS command [arg ...]: the keys
// the command table's key positions (or its key rule, as EVAL's numkeys)
// find in the arguments, as cluster clients ask for movablekeys commands.
func runCommandGetKeys(s *Server, c *client, args [][]byte, p *pending) {
	argv := args[1:]
	cmd := s.lookup(argv[0])
	if cmd != nil && len(cmd.subs) > 0 && len(argv) > 1 {
		want := cmd.name + "|" + strings.ToLower(string(argv[1]))
		for _, sub := range cmd.subs {
			if sub.name == want {
				cmd = sub
				break
			}
		}
	}
	switch {
	case cmd == nil:
		c.local.Error(msgGetKeysUnknown.Text())
		return
	case !cmd.arityOK(len(argv)):
		c.local.Error(msgGetKeysArity.Text())
		return
	case cmd.keysOf == nil && cmd.firstKey <= 0:
		c.local.Error(msgGetKeysNone.Text())
		return
	}
	// A command whose keys an argument counts (EVAL's numkeys) may name
	// none: an empty array, as Redis answers.
	keys := cmd.keys(argv)
	c.local.Array(len(keys))
	for _, k := range keys {
		c.local.Bulk(k)
	}
}

// runCommandDocs implements COMMAND DOCS [name ...]: unknown names are
// left out.
func runCommandDocs(s *Server, c *client, args [][]byte, p *pending) {
	r := &c.local
	names := args[1:]
	var found []*command
	if len(names) == 0 {
		for _, name := range s.sortedNames() {
			found = append(found, s.commands[name])
		}
	}
	for _, n := range names {
		if cmd := s.commands[strings.ToLower(string(n))]; cmd != nil {
			found = append(found, cmd)
		}
	}
	r.Map(len(found))
	for _, cmd := range found {
		r.BulkString(cmd.name)
		writeCommandDocs(r, cmd)
	}
}

// writeCommandInfo writes one command as Redis 7's COMMAND INFO does: name,
// arity, flags, first key, last key, step, ACL categories, tips, key
// specifications, subcommands.
func (s *Server) writeCommandInfo(r *replyBuf, cmd *command) {
	r.Array(10)
	r.BulkString(cmd.name)
	r.Int(int64(cmd.arity))
	flags := cmd.flags.names()
	r.Set(len(flags))
	for _, f := range flags {
		r.Simple(f)
	}
	r.Int(int64(cmd.firstKey))
	r.Int(int64(cmd.lastKey))
	r.Int(int64(cmd.keyStep))
	r.Set(1)
	r.Simple("@" + cmd.group)
	r.Array(0) // tips
	r.Array(0) // key specifications
	r.Array(len(cmd.subs))
	for _, sub := range cmd.subs {
		s.writeCommandInfo(r, sub)
	}
}

// docField is one entry of a COMMAND DOCS map: its key and its value's
// writer.
type docField struct {
	key   string
	value func(r *replyBuf)
}

// bulkField is a docField whose value is a bulk string.
func bulkField(key, value string) docField {
	return docField{key, func(r *replyBuf) { r.BulkString(value) }}
}

// writeDocMap writes the fields as a map.
func writeDocMap(r *replyBuf, fields []docField) {
	r.Map(len(fields))
	for _, f := range fields {
		r.BulkString(f.key)
		f.value(r)
	}
}

// writeCommandDocs writes one command's COMMAND DOCS map.
func writeCommandDocs(r *replyBuf, cmd *command) {
	fields := []docField{
		bulkField("summary", cmd.summary),
		bulkField("since", cmd.since),
		bulkField("group", cmd.group),
		bulkField("complexity", cmd.complexity),
	}
	if len(cmd.args) > 0 {
		fields = append(fields, docField{"arguments", func(r *replyBuf) { writeArgDocs(r, cmd.args) }})
	}
	if len(cmd.subs) > 0 {
		fields = append(fields, docField{"subcommands", func(r *replyBuf) {
			r.Map(len(cmd.subs))
			for _, sub := range cmd.subs {
				r.BulkString(sub.name)
				writeCommandDocs(r, sub)
			}
		}})
	}
	writeDocMap(r, fields)
}

// writeArgDocs writes the arguments of COMMAND DOCS, as Redis 7 does.
func writeArgDocs(r *replyBuf, args []argDoc) {
	r.Array(len(args))
	for _, a := range args {
		fields := []docField{bulkField("name", a.name), bulkField("type", a.typ)}
		if a.token != "" {
			fields = append(fields, bulkField("token", a.token))
		}
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		if len(flags) > 0 {
			fields = append(fields, docField{"flags", func(r *replyBuf) {
				r.Array(len(flags))
				for _, f := range flags {
					r.Simple(f)
				}
			}})
		}
		if len(a.subargs) > 0 {
			fields = append(fields, docField{"arguments", func(r *replyBuf) { writeArgDocs(r, a.subargs) }})
		}
		writeDocMap(r, fields)
	}
}

// sortedNames lists the command names in order, for stable COMMAND output.
func (s *Server) sortedNames() []string {
	return slices.Sorted(maps.Keys(s.commands))
}

// configValues are the settings CONFIG GET reports: what clients and
// redis-benchmark probe, with sluice's values.
func (s *Server) configValues() [][2]string {
	appendonly := "no"
	if s.cfg.Persistent {
		appendonly = "yes"
	}
	var maxKeys, maxBytes int64
	if s.cfg.Engine != nil {
		maxKeys, maxBytes = s.cfg.Engine.Limits()
	}
	return [][2]string{
		{"appendonly", appendonly},
		{"appendfsync", s.cfg.appendFsync()},
		{"save", ""},
		{"databases", "1"},
		{"maxclients", strconv.Itoa(s.cfg.MaxClients)},
		{"proto-max-bulk-len", strconv.FormatInt(s.cfg.Limits.MaxBulk, 10)},
		{"client-query-buffer-limit", strconv.FormatInt(s.cfg.Limits.MaxQueryBuffer, 10)},
		{"timeout", "0"},
		{"maxmemory", strconv.FormatInt(maxBytes, 10)},
		{"max-keys", strconv.FormatInt(maxKeys, 10)},
		{"maxmemory-policy", "noeviction"},
		{"cluster-enabled", "no"},
		{"enable-debug-command", map[bool]string{true: "yes", false: "no"}[s.cfg.EnableDebug]},
		{"max-log-limit", strconv.FormatInt(s.cfg.MaxLogLimit, 10)},
	}
}

// runConfigGet implements CONFIG GET pattern [pattern ...].
func runConfigGet(s *Server, c *client, args [][]byte, p *pending) {
	var out [][2]string
	for _, kv := range s.configValues() {
		for _, pat := range args[1:] {
			if engine.MatchGlob(bytes.ToLower(pat), []byte(kv[0])) {
				out = append(out, kv)
				break
			}
		}
	}
	c.local.Map(len(out))
	for _, kv := range out {
		c.local.BulkString(kv[0])
		c.local.BulkString(kv[1])
	}
}
