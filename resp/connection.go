package resp

import (
	"bytes"
	"cmp"
	"crypto/subtle"
	"slices"
	"strconv"
	"strings"
	"time"
)

// redisCompatVersion is the Redis version whose behaviour sluice follows; HELLO
// and INFO report it as the version so that clients enable Redis 7 features.
const redisCompatVersion = "7.2.0"

// connectionCommands are the connection commands (docs/commands.md,
// "Connection commands"): handshake, authentication and per-connection state.
func connectionCommands() []*command {
	clientCmd := &command{
		name: "client", arity: -2, group: "connection", since: "2.4.0", complexity: "O(1)",
		summary: "Connection state: ID, SETNAME, GETNAME, SETINFO, LIST, INFO, TRACKING, CACHING",
		run:     runSubcommand,
	}
	clientCmd.subs = []*command{
		{name: "client|id", arity: 2, flags: flagFast, group: "connection", since: "5.0.0",
			summary: "This connection's id",
			run:     func(s *Server, c *client, args [][]byte, p *pending) { c.local.Int(c.id) }},
		{name: "client|setname", arity: 3, flags: flagFast, group: "connection", since: "2.6.9",
			summary: "Name this connection", args: []argDoc{strArg("connection-name")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if bytes.ContainsAny(args[1], " \r\n") {
					c.local.Error(msgClientName.Text())
					return
				}
				c.mu.Lock()
				c.name = string(args[1])
				c.mu.Unlock()
				c.local.OK()
			}},
		{name: "client|getname", arity: 2, flags: flagFast, group: "connection", since: "2.6.9",
			summary: "This connection's name",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.mu.Lock()
				name := c.name
				c.mu.Unlock()
				if name == "" {
					c.local.Null()
					return
				}
				c.local.BulkString(name)
			}},
		{name: "client|setinfo", arity: 4, flags: flagFast, group: "connection", since: "7.2.0",
			summary: "Record the client library's name or version",
			args:    []argDoc{{name: "attr", typ: "oneof", subargs: []argDoc{tokenArg("LIB-NAME", "libname", "string"), tokenArg("LIB-VER", "libver", "string")}}},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				val := string(args[2])
				if strings.ContainsAny(val, " \r\n") {
					c.local.Error(msgClientInfo.Text(strings.ToUpper(string(args[1]))))
					return
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				switch strings.ToLower(string(args[1])) {
				case "lib-name":
					c.libName = val
				case "lib-ver":
					c.libVer = val
				default:
					c.local.Error(msgUnrecognizedOption.Text(printable(args[1], 64)))
					return
				}
				c.local.OK()
			}},
		{name: "client|list", arity: -2, group: "connection", since: "2.4.0",
			summary: "One line per connected client, in ID order",
			args: []argDoc{
				optional(argDoc{name: "client-type", typ: "oneof", token: "TYPE", subargs: []argDoc{
					{name: "normal", typ: "pure-token", token: "NORMAL"}, {name: "master", typ: "pure-token", token: "MASTER"},
					{name: "replica", typ: "pure-token", token: "REPLICA"}, {name: "pubsub", typ: "pure-token", token: "PUBSUB"}}}),
				optional(argDoc{name: "client-id", typ: "integer", token: "ID", multiple: true}),
			},
			run: runClientList},
		{name: "client|info", arity: 2, group: "connection", since: "6.2.0",
			summary: "This connection's line of CLIENT LIST",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Verbatim(c.infoLine(time.Now()) + "\n")
			}},
		{name: "client|tracking", arity: -3, group: "connection", since: "6.0.0",
			summary: "Client-side caching: invalidation pushes for the keys this connection reads (RESP3)",
			args: []argDoc{{name: "status", typ: "oneof", subargs: []argDoc{{name: "on", typ: "pure-token", token: "ON"}, {name: "off", typ: "pure-token", token: "OFF"}}},
				optional(argDoc{name: "optin", typ: "pure-token", token: "OPTIN"}), optional(argDoc{name: "optout", typ: "pure-token", token: "OPTOUT"}),
				optional(argDoc{name: "noloop", typ: "pure-token", token: "NOLOOP"})},
			run: runClientTracking},
		{name: "client|caching", arity: 3, group: "connection", since: "6.0.0",
			summary: "Whether the next command's reads are tracked (OPTIN or OPTOUT mode)",
			args:    []argDoc{{name: "mode", typ: "oneof", subargs: []argDoc{{name: "yes", typ: "pure-token", token: "YES"}, {name: "no", typ: "pure-token", token: "NO"}}}},
			run:     runClientCaching},
		{name: "client|no-evict", arity: 3, group: "connection", since: "7.0.0", summary: "Accepted for compatibility",
			args: []argDoc{onOff}, run: runOnOffAccepted},
		{name: "client|no-touch", arity: 3, group: "connection", since: "7.2.0", summary: "Accepted for compatibility",
			args: []argDoc{onOff}, run: runOnOffAccepted},
	}
	return []*command{
		{
			name: "ping", arity: -1, flags: flagFast, group: "connection", since: "1.0.0", complexity: "O(1)",
			summary: "PONG, or the message", args: []argDoc{optional(strArg("message"))},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if err := s.starting(); err != nil && len(args) <= 2 {
					c.local.Error(errorText(err)) // as Redis while it loads
					return
				}
				switch len(args) {
				case 1:
					c.local.Simple("PONG")
				case 2:
					c.local.Bulk(args[1])
				default:
					c.local.Error(msgArity.Text("ping"))
				}
			},
		},
		{
			name: "echo", arity: 2, flags: flagFast, group: "connection", since: "1.0.0", complexity: "O(1)",
			summary: "Reply the message", args: []argDoc{strArg("message")},
			run: func(s *Server, c *client, args [][]byte, p *pending) { c.local.Bulk(args[1]) },
		},
		{
			name: "hello", arity: -1, flags: flagFast | flagNoAuth, group: "connection", since: "6.0.0",
			complexity: "O(1)", summary: "Handshake: choose RESP2 or RESP3, authenticate, name the connection",
			args: []argDoc{optional(argDoc{name: "arguments", typ: "block", subargs: []argDoc{
				intArg("protover"),
				optional(argDoc{name: "auth", typ: "block", token: "AUTH", subargs: []argDoc{strArg("username"), strArg("password")}}),
				optional(tokenArg("SETNAME", "clientname", "string"))}})},
			run: runHello,
		},
		{
			name: "auth", arity: -2, flags: flagFast | flagNoAuth, group: "connection", since: "1.0.0",
			complexity: "O(1)", summary: "Authenticate the connection",
			args: []argDoc{optional(strArg("username")), strArg("password")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if len(args) > 3 {
					c.local.Error(msgSyntax.Text())
					return
				}
				user, pass := []byte("default"), args[1]
				if len(args) == 3 {
					user, pass = args[1], args[2]
				}
				if s.cfg.RequirePass == "" {
					c.local.Error(msgNoPassword.Text())
					return
				}
				if !s.authenticate(c, user, pass) {
					c.local.Error(msgWrongPass.Text())
					return
				}
				c.local.OK()
			},
		},
		{
			name: "select", arity: 2, flags: flagFast, group: "connection", since: "1.0.0", complexity: "O(1)",
			summary: "Select the connection's database (0-15; only 0 with several Raft groups)", args: []argDoc{intArg("index")},
			run: runSelect, // databases.go
		},
		clientCmd,
		{
			name: "quit", arity: -1, flags: flagFast | flagNoAuth, group: "connection", since: "1.0.0",
			complexity: "O(1)", summary: "Close the connection",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.OK()
				c.quit = true
			},
		},
		{
			name: "reset", arity: 1, flags: flagFast | flagNoAuth, group: "connection", since: "6.2.0",
			complexity: "O(1)", summary: "Reset the connection: RESP2, no name, not authenticated",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.stopTracking()
				c.multi = nil
				c.unwatch()
				c.setDB(0)
				c.readOnly = false // READWRITE, as Redis's RESET
				c.proto = 2
				c.setAuthenticated(s.cfg.RequirePass == "")
				c.mu.Lock()
				c.name = ""
				c.shownProto = 2
				c.mu.Unlock()
				c.local.proto = 2
				c.local.Simple("RESET")
			},
		},
	}
}

// authenticate checks a username and password in constant time and updates
// the connection (and its parser's limits) on success.
func (s *Server) authenticate(c *client, user, pass []byte) bool {
	ok := subtle.ConstantTimeCompare(pass, []byte(s.cfg.RequirePass)) == 1
	ok = ok && bytes.Equal(user, []byte("default"))
	if ok {
		c.setAuthenticated(true)
	}
	return ok
}

// setAuthenticated sets the connection's authentication, and with it the
// parser's limits from its next read on.
func (c *client) setAuthenticated(ok bool) { c.authed = ok }

// runHello implements HELLO [protover [AUTH user pass] [SETNAME name]].
func runHello(s *Server, c *client, args [][]byte, p *pending) {
	proto := c.proto
	if len(args) >= 2 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil {
			c.local.Error(msgProtoVersion.Text())
			return
		}
		if v != 2 && v != 3 {
			c.local.Error(msgNoProto.Text())
			return
		}
		proto = v
	}
	var name []byte
	setName := false
	for i := 2; i < len(args); i++ {
		switch {
		case bytes.EqualFold(args[i], []byte("auth")) && i+2 < len(args):
			if s.cfg.RequirePass == "" {
				c.local.Error(msgNoPassword.Text())
				return
			}
			if !s.authenticate(c, args[i+1], args[i+2]) {
				c.local.Error(msgWrongPass.Text())
				return
			}
			i += 2
		case bytes.EqualFold(args[i], []byte("setname")) && i+1 < len(args):
			name, setName = args[i+1], true
			if bytes.ContainsAny(name, " \r\n") {
				c.local.Error(msgClientName.Text())
				return
			}
			i++
		default:
			c.local.Error(msgHelloOption.Text(printable(args[i], 64)))
			return
		}
	}
	if !c.authed {
		c.local.Error(msgHelloNoAuth.Text())
		return
	}
	if proto != 3 {
		c.stopTracking() // its pushes need RESP3
	}
	c.setDB(0) // SPEC 16: HELLO, like RESET, returns to database 0
	c.mu.Lock()
	if setName {
		c.name = string(name)
	}
	c.shownProto = proto
	c.mu.Unlock()
	c.proto = proto
	c.local.proto = proto
	r := &c.local
	r.Map(7)
	r.BulkString("server")
	r.BulkString("sluice")
	r.BulkString("version")
	r.BulkString(redisCompatVersion)
	r.BulkString("proto")
	r.Int(int64(proto))
	r.BulkString("id")
	r.Int(c.id)
	r.BulkString("mode")
	r.BulkString(s.redisMode())
	r.BulkString("role")
	r.BulkString("master")
	r.BulkString("modules")
	r.Array(0)
}

// infoLine renders the connection as CLIENT LIST does.
func (c *client) infoLine(now time.Time) string {
	c.mu.Lock()
	name, lib, ver, last, proto, db := c.name, c.libName, c.libVer, c.lastCmd, c.shownProto, c.shownDB
	c.mu.Unlock()
	age := int64(now.Sub(c.created) / time.Second)
	return "id=" + strconv.FormatInt(c.id, 10) +
		" addr=" + c.addr +
		" laddr=" + c.laddr +
		" name=" + name +
		" age=" + strconv.FormatInt(age, 10) +
		" db=" + strconv.Itoa(int(db)) + " resp=" + strconv.Itoa(proto) +
		" cmd=" + last +
		" lib-name=" + lib +
		" lib-ver=" + ver
}

// clientList renders CLIENT LIST.
func (s *Server) clientList(keep func(*client) bool) string {
	now := time.Now()
	s.mu.Lock()
	clients := make([]*client, 0, len(s.clients))
	for c := range s.clients {
		if keep(c) {
			clients = append(clients, c)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(clients, func(a, b *client) int { return cmp.Compare(a.id, b.id) })
	var b strings.Builder
	for _, c := range clients {
		b.WriteString(c.infoLine(now))
		b.WriteByte('\n')
	}
	return b.String()
}

// runClientList answers CLIENT LIST [TYPE type | ID id [id ...]] as Redis
// 7 does: every client is of type normal (sluice has no replicas, masters
// or pub/sub clients, so those types list none); ID lists the clients of
// those IDs that are connected.
func runClientList(s *Server, c *client, args [][]byte, p *pending) {
	all := func(*client) bool { return true }
	switch {
	case len(args) == 1:
		c.local.Verbatim(s.clientList(all))
	case len(args) == 3 && strings.EqualFold(string(args[1]), "type"):
		switch strings.ToLower(string(args[2])) {
		case "normal":
			c.local.Verbatim(s.clientList(all))
		case "master", "replica", "slave", "pubsub":
			c.local.Verbatim("")
		default:
			c.local.Error(msgClientType.Text(printable(args[2], 64)))
		}
	case len(args) > 2 && strings.EqualFold(string(args[1]), "id"):
		ids := make(map[int64]bool, len(args)-2)
		for _, a := range args[2:] {
			id, err := strconv.ParseInt(string(a), 10, 64)
			if err != nil {
				c.local.Error(msgClientID.Text())
				return
			}
			ids[id] = true
		}
		c.local.Verbatim(s.clientList(func(x *client) bool { return ids[x.id] }))
	default:
		c.local.Error(msgSyntax.Text())
	}
}

// onOff is the argument of CLIENT NO-EVICT and CLIENT NO-TOUCH.
var onOff = argDoc{name: "enabled", typ: "oneof", subargs: []argDoc{{name: "on", typ: "pure-token", token: "ON"}, {name: "off", typ: "pure-token", token: "OFF"}}}

// runOnOffAccepted answers CLIENT NO-EVICT and CLIENT NO-TOUCH: OK for ON
// or OFF (sluice evicts no client and keeps no access times), a syntax
// error otherwise, as Redis.
func runOnOffAccepted(s *Server, c *client, args [][]byte, p *pending) {
	if a := args[len(args)-1]; !strings.EqualFold(string(a), "on") && !strings.EqualFold(string(a), "off") {
		c.local.Error(msgSyntax.Text())
		return
	}
	c.local.OK()
}
