package resp

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// The error replies. Every error text sluice sends comes from one of two
// catalogues, and this file is the only code that renders them:
//
//   - the codes (internal/errcode/catalogue.go): the errors the engine and
//     the cluster return, one row per code with its class and reply;
//     codeText renders them;
//   - the RESP server's own replies (msgs below): argument checks,
//     connection, transaction and protocol errors no other package returns;
//     msg.Text renders them.
//
// docs/design.md's "Error codes" tables are rendered from both
// (TestDesignErrorTable fails when they differ), TestErrorTexts pins every
// text, and TestNoInlineErrorTexts fails for an error text written
// anywhere else in this package. Adding one: docs/design.md "A new error".

// codeText renders e's reply text from its code's catalogue row; "" for a
// code it does not know.
func codeText(e *errcode.Error) string {
	row := e.Code.Entry()
	if row.Reply == "" {
		return ""
	}
	if row.Bare != "" && bare(row.Reply, e) {
		return row.Bare
	}
	if strings.IndexByte(row.Reply, '{') < 0 {
		return row.Reply // no allocation for a fixed text
	}
	return fill(row.Reply, func(name string) string {
		switch name {
		case "{detail}":
			return e.Detail
		case "{quoted}":
			return strconv.Quote(e.Detail)
		case "{key}":
			return "'" + NewArgError("", []byte(e.Detail), "").Value + "'"
		case "{num}":
			return strconv.FormatInt(e.Num, 10)
		case "{duration}":
			return time.Duration(e.Num).String()
		case "{subcause}":
			return causeText(e.Cause)
		case "{cause}":
			// Raft's error, or a coded one (the node shutting down) that
			// reads as its reply.
			if c := errcode.Of(e.Cause); c != nil {
				return codeText(c)
			} else if e.Cause != nil {
				return e.Cause.Error()
			}
			return "unknown error"
		}
		return name
	})
}

// duplicateKeyText is the reply to an RL.ALL naming key twice: the
// server's own check, with the engine's text (one text per condition).
func duplicateKeyText(key []byte) string {
	return codeText(&errcode.Error{Code: errcode.DuplicateKey, Detail: string(key)})
}

// bare reports whether every placeholder of reply has nothing to fill in
// from e: an empty Detail, a zero Num.
func bare(reply string, e *errcode.Error) bool {
	usesDetail := strings.Contains(reply, "{detail}") || strings.Contains(reply, "{quoted}") || strings.Contains(reply, "{key}")
	usesNum := strings.Contains(reply, "{num}") || strings.Contains(reply, "{duration}")
	return (!usesDetail || e.Detail == "") && (!usesNum || e.Num == 0)
}

// fill replaces each {placeholder} of format with value(placeholder).
func fill(format string, value func(name string) string) string {
	var b strings.Builder
	b.Grow(len(format) + 32)
	for {
		i := strings.IndexByte(format, '{')
		j := strings.IndexByte(format[max(i, 0):], '}')
		if i < 0 || j < 0 {
			b.WriteString(format)
			return b.String()
		}
		b.WriteString(format[:i])
		b.WriteString(value(format[i : i+j+1]))
		format = format[i+j+1:]
	}
}

// msg is one of the RESP server's own error replies.
type msg uint8

// The RESP server's own error replies, in the order of msgs.
const (
	msgSyntax msg = iota
	msgArity
	msgUnknownCommand
	msgUnknownSubcommand
	msgNoAuth
	msgArg
	msgProtocol
	msgMaxClients
	msgKeyEmpty
	msgKeyLong
	msgCostOption
	msgAcquireOption
	msgOptionValue
	msgAcquireID
	msgZeroRates
	msgInvalidCursor
	msgCountRange
	msgClientName
	msgClientInfo
	msgUnrecognizedOption
	msgNoPassword
	msgWrongPass
	msgNotInteger
	msgDBIndex
	msgProtoVersion
	msgNoProto
	msgHelloOption
	msgHelloNoAuth
	msgExecNoMulti
	msgDiscardNoMulti
	msgExecAbort
	msgMultiNested
	msgNotInMulti
	msgMultiTooLong
	msgConfigSet
	msgDebugDisabled
	msgDebugUsage
	msgNoDigest
	msgTrackingBoth
	msgTrackingSwitch
	msgTrackingPrefix
	msgTrackingRedirect
	msgTrackingBcast
	msgTrackingResp3
	msgTrackingDisabled
	msgCachingMode
	msgCachingYes
	msgCachingNo
	msgClusterDisabled
	msgClusterUnsupported
	msgCrossSlot
	msgMoved
	msgDecrOverflow
	msgUnsupportedOption
	msgExpireNXConflict
	msgExpireGTLT
	msgRLSOff
	msgRLSEmptyDescriptor
	msgRLSNoValue
	msgRLSBadRequest
	msgRLSReload
	msgNoBackup
	msgClientType
	msgClientID
	msgNaNOrInf
	msgZAddXXNX
	msgZAddGTLTNX
	msgZAddIncrPair
	msgMinMaxFloat
	msgMinMaxLex
	msgLimitNeedsBy
	msgWithScoresLex
	msgScriptUnknownCommand
	msgScriptArity
	msgScriptNotAllowed
	msgScriptReadOnly
	msgScriptNonLocal
	msgScriptNoArgs
	msgScriptBadArg
	msgScriptCompile
	msgScriptSteps
	msgScriptMemory
	msgScriptNesting
	msgScriptReadOnlyTable
	msgScriptNoGlobal
	msgScriptWrongArgs
	msgScriptBadResp
	msgScriptFormat
	msgNumKeysNegative
	msgNumKeysTooMany
	msgNotBusy
	msgGetKeysUnknown
	msgGetKeysArity
	msgGetKeysNone
	msgScriptFlushOption
	msgWatchInMulti
	msgNotInCluster
	msgSwapDBFirst
	msgSwapDBSecond
	msgMoveSame

	numMsgs
)

// msgs is the catalogue of the RESP server's own replies: the text (a
// format whose {placeholders} Text fills in order) and when it is sent.
var msgs = [numMsgs]struct{ text, when string }{
	msgSyntax:             {"ERR syntax error", "an argument list the command's grammar does not take"},
	msgArity:              {"ERR wrong number of arguments for '{command}' command", "a command or subcommand with too few or too many arguments"},
	msgUnknownCommand:     {"ERR unknown command '{command}', with args beginning with: {args}", "a command sluice does not know ({args}: each argument quoted and followed by a space, while the text is under 256 bytes)"},
	msgUnknownSubcommand:  {"ERR unknown subcommand '{subcommand}'. Try {COMMAND} HELP.", "a container command (CLIENT, CONFIG, ...) with a subcommand it does not know"},
	msgNoAuth:             {"NOAUTH Authentication required.", "a command before AUTH on a server with --requirepass"},
	msgArg:                {"ERR invalid {name} '{value}': {reason}", "an argument out of its range (`ArgError`; the value quoted safely, at most 64 bytes)"},
	msgProtocol:           {"ERR Protocol error: {reason}", "input that breaks the protocol's framing or limits; the connection is closed"},
	msgMaxClients:         {"ERR max number of clients reached", "a connection beyond --maxclients; it is closed"},
	msgKeyEmpty:           {"ERR invalid key '': must be 1 to {max} bytes", "an empty key"},
	msgKeyLong:            {"ERR invalid key: longer than {max} bytes", "a key longer than the key length limit"},
	msgCostOption:         {"ERR unknown option '{option}' for '{command}': expected COST n", "an option an RL.* decision does not take"},
	msgAcquireOption:      {"ERR unknown option '{option}' for 'rl.acquire': expected ID token or COST n", "an option RL.ACQUIRE does not take"},
	msgOptionValue:        {"ERR option {option} needs a value", "COST or ID as the last argument"},
	msgAcquireID:          {"ERR option ID token is required for 'rl.acquire'", "RL.ACQUIRE without ID"},
	msgZeroRates:          {"ERR Zero rates are not supported", "CL.THROTTLE with a zero count or period (redis-cell's text)"},
	msgInvalidCursor:      {"ERR invalid cursor", "SCAN with a cursor that is not a number"},
	msgCountRange:         {"ERR value is out of range, must be positive", "SCAN's COUNT below 1"},
	msgClientName:         {"ERR Client names cannot contain spaces, newlines or special characters.", "CLIENT SETNAME or HELLO SETNAME with a space or newline"},
	msgClientInfo:         {"ERR {ATTR} cannot contain spaces, newlines or special characters.", "CLIENT SETINFO with a space or newline"},
	msgUnrecognizedOption: {"ERR Unrecognized option '{option}'", "CLIENT SETINFO with another attribute than LIB-NAME or LIB-VER"},
	msgNoPassword:         {"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?", "AUTH on a server without --requirepass"},
	msgWrongPass:          {"WRONGPASS invalid username-password pair or user is disabled.", "AUTH or HELLO AUTH with a wrong user or password"},
	msgNotInteger:         {"ERR value is not an integer or out of range", "SELECT's index, an integer argument of a string command (INCRBY's increment, EX's seconds, ...) that is not a 64-bit integer (Redis's text)"},
	msgDBIndex:            {"ERR DB index is out of range", "SELECT, SWAPDB or MOVE of a database outside 0-15 (Redis's text)"},
	msgProtoVersion:       {"ERR Protocol version is not an integer or out of range", "HELLO's version is not a number"},
	msgNoProto:            {"NOPROTO unsupported protocol version", "HELLO with a version other than 2 or 3"},
	msgHelloOption:        {"ERR Syntax error in HELLO option '{option}'", "HELLO with an option it does not take"},
	msgHelloNoAuth:        {"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time", "HELLO without AUTH before authenticating"},
	msgExecNoMulti:        {"ERR EXEC without MULTI", "EXEC outside a transaction"},
	msgDiscardNoMulti:     {"ERR DISCARD without MULTI", "DISCARD outside a transaction"},
	msgExecAbort:          {"EXECABORT Transaction discarded because of previous errors.", "EXEC after a command of the transaction was refused when queued"},
	msgMultiNested:        {"ERR MULTI calls can not be nested", "MULTI inside a transaction"},
	msgNotInMulti:         {"ERR {COMMAND} is not allowed in MULTI: its reply grows with the keyspace", "KEYS or SCAN inside a transaction"},
	msgMultiTooLong:       {"ERR MULTI queue too long", "a transaction past its command or byte bound"},
	msgConfigSet:          {"ERR CONFIG SET is not supported: sluice is configured by its flags", "CONFIG SET"},
	msgDebugDisabled:      {"ERR DEBUG command not allowed. Start sluice with --enable-debug-command to use it.", "DEBUG on a server without --enable-debug-command"},
	msgDebugUsage:         {"ERR unknown DEBUG subcommand or wrong arguments: use DEBUG TIMEWARP ms, DEBUG CLOCK FREEZE [unix-ms] or DEBUG CLOCK RESUME", "DEBUG with a subcommand or arguments it does not take"},
	msgNoDigest:           {"ERR DEBUG DIGEST: this server has no engine to digest", "DEBUG DIGEST on a server whose executor has no engine"},
	msgTrackingBoth:       {"ERR You can't specify both OPTIN mode and OPTOUT mode", "CLIENT TRACKING ON OPTIN OPTOUT"},
	msgTrackingSwitch:     {"ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.", "CLIENT TRACKING switching between OPTIN and OPTOUT"},
	msgTrackingPrefix:     {"ERR PREFIX option requires BCAST mode to be enabled", "CLIENT TRACKING PREFIX without BCAST"},
	msgTrackingRedirect:   {"ERR REDIRECT is not supported: use HELLO 3 and receive the invalidations on this connection", "CLIENT TRACKING REDIRECT"},
	msgTrackingBcast:      {"ERR BCAST is not supported: track the keys read instead", "CLIENT TRACKING BCAST"},
	msgTrackingResp3:      {"ERR CLIENT TRACKING needs RESP3 (HELLO 3): invalidations are RESP3 pushes, and REDIRECT is not supported", "CLIENT TRACKING ON on a RESP2 connection"},
	msgTrackingDisabled:   {"ERR client tracking is not enabled on this server", "CLIENT TRACKING ON on a server without a tracker"},
	msgCachingMode:        {"ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled", "CLIENT CACHING without OPTIN or OPTOUT tracking"},
	msgCachingYes:         {"ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.", "CLIENT CACHING YES without OPTIN"},
	msgCachingNo:          {"ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.", "CLIENT CACHING NO without OPTOUT"},
	msgClusterDisabled:    {"ERR This instance has cluster support disabled", "a CLUSTER command, READONLY, READWRITE or ASKING on a server without --peers (Redis's text)"},
	msgClusterUnsupported: {"ERR CLUSTER {SUBCOMMAND} is not supported: Raft assigns slots and members", "a CLUSTER subcommand that would change slots or members"},
	msgCrossSlot:          {"CROSSSLOT Keys in request don't hash to the same slot", "a command or transaction whose keys belong to different Raft groups"},
	msgMoved:              {"MOVED {slot} {addr}", "with --redirect, a keyed command sent to a node that does not lead the key's group"},
	msgDecrOverflow:       {"ERR decrement would overflow", "DECRBY with -9223372036854775808 (Redis's text)"},
	msgUnsupportedOption:  {"ERR Unsupported option {option}", "EXPIRE-family with a condition it does not know (Redis's text)"},
	msgExpireNXConflict:   {"ERR NX and XX, GT or LT options at the same time are not compatible", "EXPIRE-family with NX and another condition (Redis's text)"},
	msgExpireGTLT:         {"ERR GT and LT options at the same time are not compatible", "EXPIRE-family with GT and LT (Redis's text)"},
	msgRLSOff:             {"ERR the rate limit service is not configured: start sluice with --rls-config DIR", "RL.CHECK or RL.RULES on a server without --rls-config"},
	msgRLSEmptyDescriptor: {"ERR syntax error: an empty descriptor (a '|' with no key and value on one side)", "RL.CHECK with a descriptor that has no entry"},
	msgRLSNoValue:         {"ERR syntax error: descriptor key '{key}' has no value", "RL.CHECK whose last descriptor entry has a key and no value"},
	msgRLSBadRequest:      {"ERR {reason}", "RL.CHECK that the gRPC service would refuse as InvalidArgument (an empty domain, no descriptors, ...)"},
	msgRLSReload:          {"ERR rules not reloaded, the previous rules stay in force: {reason}", "RL.RULES RELOAD with a file that does not load (the reason on one line)"},
	msgNoBackup:           {"ERR this node cannot take backups", "RAFT.BACKUP on a server whose executor keeps no Raft log (an in-memory test server)"},
	msgClientType:         {"ERR Unknown client type '{type}'", "CLIENT LIST TYPE with another type than normal, master, replica, slave or pubsub (Redis's text)"},
	msgClientID:           {"ERR Invalid client ID", "CLIENT LIST ID with an ID that is not an integer (Redis's text)"},
	msgNaNOrInf:           {"ERR value is NaN or Infinity", "HINCRBYFLOAT with an infinite increment (Redis's text)"},
	msgZAddXXNX:           {"ERR XX and NX options at the same time are not compatible", "ZADD with XX and NX (Redis's text)"},
	msgZAddGTLTNX:         {"ERR GT, LT, and/or NX options at the same time are not compatible", "ZADD with two of GT, LT and NX (Redis's text)"},
	msgZAddIncrPair:       {"ERR INCR option supports a single increment-element pair", "ZADD INCR with more than one score and member (Redis's text)"},
	msgMinMaxFloat:        {"ERR min or max is not a float", "a score range (ZRANGEBYSCORE, ZCOUNT, ZREMRANGEBYSCORE...) whose bound is not a number (Redis's text)"},
	msgMinMaxLex:          {"ERR min or max not valid string range item", "a BYLEX range whose bound is not -, + or starts with [ or ( (Redis's text)"},
	msgLimitNeedsBy:       {"ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX", "ZRANGE with LIMIT on ranks (Redis's text)"},
	msgWithScoresLex:      {"ERR syntax error, WITHSCORES not supported in combination with BYLEX", "ZRANGE BYLEX with WITHSCORES (Redis's text)"},
	// Scripts (scripts.go, internal/script). Inside a script, an error of
	// redis.call ends the script with the text followed by
	// " script: <sha1>, on @user_script:<line>." (Redis's).
	msgScriptUnknownCommand: {"ERR Unknown Redis command called from script", "redis.call of a command sluice does not know (Redis's text)"},
	msgScriptArity:          {"ERR Wrong number of args calling Redis command from script", "redis.call with a wrong number of arguments (Redis's text)"},
	msgScriptNotAllowed:     {"ERR This Redis command is not allowed from script", "redis.call of a command Redis refuses in scripts (MULTI, EVAL, SCRIPT, CLIENT, blocking and pub/sub commands...) or whose reply depends on the node (INFO, COMMAND, CLUSTER, RAFT.*, RL.CHECK) (Redis's text)"},
	msgScriptReadOnly:       {"ERR Write commands are not allowed from read-only scripts.", "a write command called by EVAL_RO or EVALSHA_RO (Redis's text)"},
	msgScriptNonLocal:       {"ERR Script attempted to access a non local key in a cluster node", "with --shards > 1, a script touching a key of another group (Redis's text)"},
	msgScriptNoArgs:         {"ERR Please specify at least one argument for this redis lib call", "redis.call() without arguments (Redis's text)"},
	msgScriptBadArg:         {"ERR Lua redis lib command arguments must be strings or integers", "redis.call with an argument that is neither a string nor a number (Redis's text)"},
	msgScriptCompile:        {"ERR Error compiling script (new function): {error}", "EVAL or SCRIPT LOAD of a script that does not compile (the error is the compiler's); the script is not cached"},
	msgScriptSteps:          {"ERR script exceeded its budget of {steps} instructions (script-max-steps)", "a script that ran --script-max-steps Lua instructions; its writes are undone"},
	msgScriptMemory:         {"ERR script exceeded its budget of {bytes} bytes of memory (script-max-memory)", "a script that created more than --script-max-memory bytes of strings, or recursed too deep; its writes are undone"},
	msgScriptNesting:        {"ERR reached lua stack limit", "a script reply nested deeper than 100 levels (Redis's text)"},
	msgScriptReadOnlyTable:  {"Attempt to modify a readonly table", "a script assigning a global or a field of a library table (Redis's text, after the script's position)"},
	msgScriptNoGlobal:       {"Script attempted to access nonexistent global variable '{name}'", "a script reading a global that does not exist (Redis's text, after the script's position)"},
	msgScriptWrongArgs:      {"ERR wrong number or type of arguments", "redis.error_reply or redis.status_reply without one string (Redis's text)"},
	msgScriptBadResp:        {"ERR RESP version must be 2 or 3.", "redis.setresp with another version (Redis's text)"},
	msgScriptFormat:         {"invalid format (width or precision too long)", "string.format with a width or precision of more than two digits (C Lua's text, after the script's position)"},
	msgNumKeysNegative:      {"ERR Number of keys can't be negative", "EVAL with a negative numkeys (Redis's text)"},
	msgNumKeysTooMany:       {"ERR Number of keys can't be greater than number of args", "EVAL with a numkeys beyond its arguments (Redis's text)"},
	msgNotBusy:              {"NOTBUSY No scripts in execution right now.", "SCRIPT KILL: a script never runs past its budget (Redis's text)"},
	msgGetKeysUnknown:       {"ERR Invalid command specified", "COMMAND GETKEYS of a command sluice does not have (Redis's text)"},
	msgGetKeysArity:         {"ERR Invalid number of arguments specified for command", "COMMAND GETKEYS of a command with a wrong number of arguments (Redis's text)"},
	msgGetKeysNone:          {"ERR The command has no key arguments", "COMMAND GETKEYS of a command whose arguments name no key (Redis's text)"},
	msgScriptFlushOption:    {"ERR SCRIPT FLUSH only support SYNC|ASYNC option", "SCRIPT FLUSH with another argument (Redis's text)"},
	msgWatchInMulti:         {"ERR WATCH inside MULTI is not allowed", "WATCH between MULTI and EXEC (Redis's text)"},
	msgNotInCluster:         {"ERR {command} is not allowed in cluster mode", "SELECT of another database than 0, SWAPDB or MOVE on a node with several Raft groups (Redis Cluster's text)"},
	msgSwapDBFirst:          {"ERR invalid first DB index", "SWAPDB whose first index is not an integer (Redis's text)"},
	msgSwapDBSecond:         {"ERR invalid second DB index", "SWAPDB whose second index is not an integer (Redis's text)"},
	msgMoveSame:             {"ERR source and destination objects are the same", "MOVE to the connection's own database (Redis's text)"},
}

// errNoScript is EVALSHA's reply to a SHA1 that cannot be one (the
// engine's NOSCRIPT).
var errNoScript = errcode.New(errcode.NoScript)

// Text returns m's reply text (without the leading '-'), its placeholders
// filled with args in order. A fixed text costs no allocation.
func (m msg) Text(args ...string) string {
	text := msgs[m].text
	if len(args) == 0 {
		return text
	}
	return fill(text, func(name string) string {
		if len(args) == 0 {
			return name
		}
		v := args[0]
		args = args[1:]
		return v
	})
}

// errSyntax is resp's own error; its text is the reply.
var errSyntax = errors.New(msgSyntax.Text())

// errorText renders err as an error reply's text: a coded error through
// codeText; resp's own errors (their texts are replies) as they are;
// anything else as ERR and its text.
func errorText(err error) string {
	if e := errcode.Of(err); e != nil {
		if text := codeText(e); text != "" {
			return text
		}
		return "ERR " + e.Error()
	}
	var ae *ArgError
	if err == errSyntax || errors.As(err, &ae) {
		return err.Error()
	}
	return "ERR " + err.Error()
}

// causeText renders the cause of a failed membership step without its
// error prefix: a coded cause as its reply, another as its text.
func causeText(err error) string {
	if c := errcode.Of(err); c != nil {
		if c.Code == errcode.Other {
			return c.Detail
		}
		if t := codeText(c); t != "" {
			return strings.TrimPrefix(t, "ERR ")
		}
		return c.Error()
	}
	if err != nil {
		return err.Error()
	}
	return "unknown error"
}

// protoErr is what is wrong with a client's input (parser.go). Every one
// closes the connection: after the `-ERR Protocol error: <reason>` reply,
// or, for protoHTTP, without one.
type protoErr uint8

// The ways a request breaks the protocol, with Redis 7's reasons.
const (
	protoNone protoErr = iota
	protoInvalidMultibulk
	protoInvalidBulk
	protoUnauthMultibulk
	protoUnauthBulk
	protoTooBigInline
	protoQueryBuffer
	protoUnbalancedQuotes
	protoExpectedDollar
	protoHTTP

	numProtoErrs
)

// protoErrs are the reasons msgProtocol renders, and whether the reply is
// written before the connection closes.
var protoErrs = [numProtoErrs]struct {
	reason string
	reply  bool
}{
	protoInvalidMultibulk: {"invalid multibulk length", true},
	protoInvalidBulk:      {"invalid bulk length", true},
	protoUnauthMultibulk:  {"unauthenticated multibulk length", true},
	protoUnauthBulk:       {"unauthenticated bulk length", true},
	protoTooBigInline:     {"too big inline request", true},
	protoQueryBuffer:      {"query buffer limit exceeded", true},
	protoUnbalancedQuotes: {"unbalanced quotes in request", true},
	protoExpectedDollar:   {"expected '$', got '{got}'", true},
	// An inline command POST or Host: is taken for a cross-protocol
	// attack from a browser: the connection closes at once, as Redis does.
	protoHTTP: {"possible SECURITY ATTACK detected: HTTP POST or Host: line on the RESP port", false},
}

// ProtocolError is a client's input that breaks the protocol's framing or
// limits; the parser stops at it, and the connection closes once the
// replies of the commands before it are written.
type ProtocolError struct {
	what protoErr
	got  byte // protoExpectedDollar: the byte found instead of '$'
}

// reason returns the reason the reply gives. As Redis does, it never puts
// \r or \n in a reply; other non-printable bytes become a space too.
func (e *ProtocolError) reason() string {
	r := protoErrs[e.what].reason
	if e.what == protoExpectedDollar {
		c := e.got
		if c < 0x20 || c > 0x7e {
			c = ' '
		}
		r = fill(r, func(string) string { return string(rune(c)) })
	}
	return r
}

// Error returns "Protocol error: <reason>", the reply text without "ERR ".
func (e *ProtocolError) Error() string { return "Protocol error: " + e.reason() }

// Reply returns the error reply to write before closing (with its `-`
// and CRLF), or "" to close without one.
func (e *ProtocolError) Reply() string {
	if !protoErrs[e.what].reply {
		return ""
	}
	return "-" + msgProtocol.Text(e.reason()) + "\r\n"
}
