package resp

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rls/rules"
)

// RL.CHECK and RL.RULES: Envoy's rate limit service (SPEC section 12) for
// redis-cli users and tests. RL.CHECK decides what a gRPC ShouldRateLimit
// call with the same domain and descriptors would (the same rls.Service,
// one engine operation); RL.RULES lists and reloads the rules.

func rlsCommands() []*command {
	return []*command{
		{
			name: "rl.check", arity: -4, flags: flagWrite | flagDenyOOM, group: "sluice", since: "1.2.0",
			complexity: "O(N) descriptors",
			summary:    "Decide a request of Envoy's rate limit service: a domain and descriptors, all charged or none",
			args: []argDoc{strArg("domain"), optional(tokenArg("HITS", "n", "integer")),
				multiple(argDoc{name: "descriptor", typ: "block", subargs: []argDoc{
					multiple(argDoc{name: "entry", typ: "block", subargs: []argDoc{strArg("key"), strArg("value")}}),
					optional(argDoc{name: "separator", typ: "pure-token", token: "|"}),
				}})},
			// Not a decision for sluice_decisions_total: a request with
			// no limit runs no op; the sluice_rls_* metrics count it.
			run:    runRLCheck,
			render: renderRLCheck,
		},
		{
			name: "rl.rules", arity: -1, flags: flagLoading | flagStale, group: "sluice", since: "1.2.0",
			complexity: "O(N) rules",
			summary:    "List the rate limit service's rules and their version hash, or RELOAD them from --rls-config",
			args:       []argDoc{optional(argDoc{name: "reload", typ: "pure-token", token: "RELOAD"})},
			run:        runRLRules,
		},
	}
}

// parseRLCheck parses `RL.CHECK domain [HITS n] k v [k v ...] [| k v ...]`
// into a request. Descriptors are separated by a lone `|`; HITS, right after
// the domain, is the request's hits_addend.
func parseRLCheck(args [][]byte) (*rls.Request, string) {
	req := &rls.Request{Domain: string(args[1])}
	rest := args[2:]
	if len(rest) >= 2 && strings.EqualFold(string(rest[0]), "hits") {
		n, err := strconv.ParseUint(string(rest[1]), 10, 32)
		if err != nil {
			return nil, NewArgError("HITS", rest[1], "must be an integer from 0 to 4294967295").Error()
		}
		req.Hits = uint32(n)
		rest = rest[2:]
	}
	var cur []rules.Entry
	flush := func() string {
		if len(cur) == 0 {
			return msgRLSEmptyDescriptor.Text()
		}
		req.Descriptors = append(req.Descriptors, rls.Descriptor{Entries: cur})
		cur = nil
		return ""
	}
	for len(rest) > 0 {
		if bytes.Equal(rest[0], []byte("|")) {
			if msg := flush(); msg != "" {
				return nil, msg
			}
			rest = rest[1:]
			continue
		}
		if len(rest) < 2 {
			return nil, msgRLSNoValue.Text(NewArgError("", rest[0], "").Value)
		}
		cur = append(cur, rules.Entry{Key: string(rest[0]), Value: string(rest[1])})
		rest = rest[2:]
	}
	if msg := flush(); msg != "" {
		return nil, msg
	}
	return req, ""
}

func runRLCheck(s *Server, c *client, args [][]byte, p *pending) {
	if s.cfg.RLS == nil {
		c.local.Error(msgRLSOff.Text())
		return
	}
	req, msg := parseRLCheck(args)
	if msg != "" {
		c.local.Error(msg)
		return
	}
	plan, err := s.cfg.RLS.Prepare(req)
	if err != nil {
		c.local.Error(rlsErrorText(err))
		return
	}
	if !plan.HasOp() {
		res, err := s.cfg.RLS.Finish(plan, &engine.Result{})
		if err != nil {
			c.local.Error(rlsErrorText(err))
			return
		}
		writeRLSResponse(&c.local, res)
		return
	}
	p.rlsPlan = plan
	c.enqueue(p, plan.Op())
}

func renderRLCheck(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	res, err := s.cfg.RLS.Finish(p.rlsPlan, &results[0])
	if err != nil {
		r.Error(rlsErrorText(err))
		return
	}
	writeRLSResponse(r, res)
}

// rlsErrorText renders an error of the rate limit service: a bad request
// as ERR and its reason, the engine's and cluster's errors by their code.
func rlsErrorText(err error) string {
	var bad *rls.BadRequestError
	if errors.As(err, &bad) {
		return msgRLSBadRequest.Text(bad.Reason)
	}
	return errorText(err)
}

// writeRLSResponse writes RL.CHECK's reply: the overall code, then one
// array per descriptor: code, limit_remaining, duration_until_reset in
// seconds, and the current limit's requests_per_unit, unit and name (nil
// when no limit applies).
func writeRLSResponse(r *replyBuf, res *rls.Response) {
	r.Array(2)
	r.BulkString(res.Overall.String())
	r.Array(len(res.Statuses))
	for i := range res.Statuses {
		st := &res.Statuses[i]
		r.Array(6)
		r.BulkString(st.Code.String())
		r.Int(int64(st.Remaining))
		if st.Limit == nil {
			r.Int(0)
			r.Null()
			r.Null()
			r.Null()
			continue
		}
		r.Int(st.ResetSeconds)
		r.Int(int64(st.Limit.RequestsPerUnit))
		r.BulkString(st.Limit.Unit.String())
		r.BulkString(st.Limit.Name)
	}
}

// runRLRules is RL.RULES (the listing) and RL.RULES RELOAD.
func runRLRules(s *Server, c *client, args [][]byte, p *pending) {
	if s.cfg.RLS == nil {
		c.local.Error(msgRLSOff.Text())
		return
	}
	switch {
	case len(args) == 1:
	case len(args) == 2 && strings.EqualFold(string(args[1]), "reload"):
		if _, err := s.cfg.RLS.Reload(); err != nil {
			c.local.Error(msgRLSReload.Text(strings.ReplaceAll(err.Error(), "\n", " ")))
			return
		}
	default:
		c.local.Error(errSyntax.Error())
		return
	}
	writeRLSRules(&c.local, s.cfg.RLS)
}

// writeRLSRules writes the rules in force as field-value pairs (a map in
// RESP3): version, shadow, loads, load_errors, last_error, and domains:
// one array per domain of its name, its file and its rules, each rule one
// line "path requests_per_unit/unit algorithm [flags] [name=...]".
func writeRLSRules(r *replyBuf, svc *rls.Service) {
	set := svc.Rules()
	loads, errs, last := svc.LoadStats()
	r.Map(6)
	r.BulkString("version")
	r.BulkString(set.Version())
	r.BulkString("shadow")
	r.Int(b2i(svc.Shadow()))
	r.BulkString("loads")
	r.Int(int64(loads))
	r.BulkString("load_errors")
	r.Int(int64(errs))
	r.BulkString("last_error")
	r.BulkString(last)
	r.BulkString("domains")
	ds := set.Domains()
	r.Array(len(ds))
	for _, d := range ds {
		r.Array(3)
		r.BulkString(d.Name)
		r.BulkString(d.File)
		r.Array(len(d.Rules))
		for _, l := range d.Rules {
			r.BulkString(RuleLine(l))
		}
	}
}

// RuleLine describes one rule as RL.RULES lists it.
func RuleLine(l *rules.Limit) string {
	var b strings.Builder
	b.WriteString(l.Path)
	if l.Unlimited {
		b.WriteString(" unlimited")
	} else {
		b.WriteString(" " + strconv.FormatUint(uint64(l.RequestsPerUnit), 10) + "/" + l.Unit.String() + " " + l.Algorithm.String())
	}
	if l.ShadowMode {
		b.WriteString(" shadow")
	}
	if l.DetailedMetric {
		b.WriteString(" detailed_metric")
	}
	if l.Name != "" {
		b.WriteString(" name=" + l.Name)
	}
	if len(l.Replaces) > 0 {
		b.WriteString(" replaces=" + strings.Join(l.Replaces, ","))
	}
	return b.String()
}

// rlsInfoFields are INFO rls's fields.
func rlsInfoFields(svc *rls.Service) []string {
	set := svc.Rules()
	loads, errs, _ := svc.LoadStats()
	itoa := func(n uint64) string { return strconv.FormatUint(n, 10) }
	fields := []string{
		"rls_rules_version", set.Version(),
		"rls_domains", strconv.Itoa(len(set.Domains())),
		"rls_rules", strconv.Itoa(set.NumRules()),
		"rls_shadow", strconv.FormatInt(b2i(svc.Shadow()), 10),
		"rls_config_loads", itoa(loads),
		"rls_config_load_errors", itoa(errs),
	}
	for i, st := range svc.Stats() {
		fields = append(fields, "rls_rule"+strconv.Itoa(i),
			"rule="+infoValue(st.Rule)+",total_hits="+itoa(st.TotalHits)+",over_limit="+itoa(st.OverLimit)+
				",near_limit="+itoa(st.NearLimit)+",shadow_over_limit="+itoa(st.ShadowOverLimit)+",within_limit="+itoa(st.WithinLimit))
	}
	return fields
}

// infoValue keeps an INFO value on its line and its fields apart.
func infoValue(s string) string {
	return strings.NewReplacer("\r", "\\r", "\n", "\\n", ",", "\\,", "=", "\\=").Replace(s)
}
