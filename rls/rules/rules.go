// Package rules holds the rate limit rules of sluice's Envoy rate limit
// service (docs/design.md, "The Envoy rate limit service"): it reads
// envoyproxy/ratelimit's configuration files (one domain per YAML file),
// refuses what it does not support by name, and finds the rule a request's
// descriptor gets exactly as envoyproxy/ratelimit's GetLimit does.
//
// A Set is immutable once loaded; a reload builds a new one. The package
// knows nothing of gRPC, RESP or the engine.
package rules

import (
	"strings"
)

// Unit is a rule's time unit. The values are those of Envoy's
// RateLimitResponse.RateLimit.Unit, so a unit crosses the gRPC API as is.
type Unit int32

// The units of envoyproxy/ratelimit. Week, month and year are 7, 30 and
// 365 days, every window aligned to the Unix epoch.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "month", "year", "week"}

var unitSeconds = [...]int64{0, 1, 60, 3600, 86400, 30 * 86400, 365 * 86400, 7 * 86400}

// Seconds returns the unit's length in seconds (0 for UnitUnknown).
func (u Unit) Seconds() int64 {
	if u < 0 || int(u) >= len(unitSeconds) {
		return 0
	}
	return unitSeconds[u]
}

// Valid reports whether u is one of the seven units.
func (u Unit) Valid() bool { return u.Seconds() > 0 }

// String returns the unit's lower-case name as the config files write it.
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return "unknown"
	}
	return unitNames[u]
}

// ParseUnit parses a unit name, case-insensitively ("second" ... "year").
func ParseUnit(s string) (Unit, bool) {
	for u := UnitSecond; u <= UnitWeek; u++ {
		if strings.EqualFold(s, unitNames[u]) {
			return u, true
		}
	}
	return UnitUnknown, false
}

// Algorithm is sluice's extension of a rule: which limiter counts it.
type Algorithm uint8

// The algorithms a rule may name (`algorithm:` in `rate_limit`). Fixed, the
// default, is what envoyproxy/ratelimit counts.
const (
	Fixed Algorithm = iota
	Sliding
	Token
	Leaky
	Log
)

var algorithmNames = [...]string{"fixed", "sliding", "token", "leaky", "log"}

// String returns the algorithm's name as the config files write it.
func (a Algorithm) String() string {
	if int(a) >= len(algorithmNames) {
		return "unknown"
	}
	return algorithmNames[a]
}

// ParseAlgorithm parses an algorithm name, case-insensitively.
func ParseAlgorithm(s string) (Algorithm, bool) {
	for a := range algorithmNames {
		if strings.EqualFold(s, algorithmNames[a]) {
			return Algorithm(a), true
		}
	}
	return Fixed, false
}

// Limit is one rule's `rate_limit` with the flags of its descriptor.
type Limit struct {
	// Path is the rule's place in its domain as envoyproxy/ratelimit
	// names it: the domain, then each level's key or key_value, joined
	// by dots ("mydomain.remote_address.path_/api*"). Metrics use it.
	Path            string
	Domain          string
	RequestsPerUnit uint32
	Unit            Unit
	Name            string
	Algorithm       Algorithm
	Unlimited       bool
	Replaces        []string
	ShadowMode      bool
	DetailedMetric  bool
	// Override says that the limit came from the request's descriptor
	// (its `limit` field), not from a rule.
	Override bool
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key   string
	Value string
}

// node is one level of a domain's descriptor tree.
type node struct {
	children map[string]*node // by key, or key_value
	// wildcards are the children's map keys that end in '*', in file
	// order: a request value matching none exactly tries them in order.
	wildcards      []string
	limit          *Limit
	valueToMetric  bool
	shareThreshold bool
}

// Domain is one file's rules.
type Domain struct {
	Name  string
	File  string   // the file it was read from (base name)
	Rules []*Limit // every rule with a rate_limit, in file order
	root  node
}

// Set is every domain loaded from one directory, immutable.
type Set struct {
	domains map[string]*Domain
	order   []string // domain names, sorted
	version string
}

// Version returns a hash of what is loaded (the domains and their rules,
// not the files' bytes: comments and key order do not change it), the same
// on every node that loaded the same rules.
func (s *Set) Version() string { return s.version }

// Domains returns the loaded domains, sorted by name.
func (s *Set) Domains() []*Domain {
	out := make([]*Domain, 0, len(s.order))
	for _, n := range s.order {
		out = append(out, s.domains[n])
	}
	return out
}

// Domain returns the named domain, or nil.
func (s *Set) Domain(name string) *Domain {
	if s == nil {
		return nil
	}
	return s.domains[name]
}

// NumRules returns how many rules (with a rate_limit) are loaded.
func (s *Set) NumRules() int {
	n := 0
	for _, d := range s.domains {
		n += len(d.Rules)
	}
	return n
}

// Match is what Lookup found for one descriptor.
type Match struct {
	// Limit is the rule the descriptor gets, nil when none.
	Limit *Limit
	// StatKey names the metric series the descriptor counts in: the
	// rule's Path, or with detailed_metric or value_to_metric the path
	// with the request's values (as envoyproxy/ratelimit names its stats).
	StatKey string
	// Share holds, per entry, the wildcard pattern that replaces the
	// entry's value in the counter's name (share_threshold), or "" to
	// keep the value; nil when no entry shares.
	Share []string
}

// Lookup finds the rule for one descriptor of domain, as
// envoyproxy/ratelimit's GetLimit: at each entry in order, the child for
// key_value, else the first wildcard child (in file order) whose prefix
// matches key_value, else the child for key alone; the rule counts only
// when found at the descriptor's last entry. An unknown domain, or no rule,
// gives a zero Match.
func (s *Set) Lookup(domain string, entries []Entry) Match {
	d := s.Domain(domain)
	if d == nil || len(entries) == 0 {
		return Match{}
	}
	// The walk, remembering per entry how it matched; the metric's name is
	// built afterwards, and only when it is not the rule's own path.
	var steps [maxStack]step
	st := steps[:0]
	if len(entries) > maxStack {
		st = make([]step, 0, len(entries))
	}
	cur := &d.root
	var found *Limit
	var share []string
	plain := true // the metric is found.Path: no value_to_metric, no odd wildcard
	for i, e := range entries {
		next := cur.children[e.Key+"_"+e.Value]
		byValue := next != nil
		wildcard := ""
		if next == nil {
			for _, w := range cur.wildcards {
				if len(w)-1 <= len(e.Key)+1+len(e.Value) && strings.HasPrefix(e.Key+"_"+e.Value, w[:len(w)-1]) {
					next, wildcard = cur.children[w], w
					break
				}
			}
		}
		if next == nil {
			next, byValue = cur.children[e.Key], false
		}
		if next != nil && (next.valueToMetric || wildcard != "" && !strings.HasPrefix(wildcard, e.Key+"_")) {
			plain = false
		}
		if wildcard != "" && next.shareThreshold {
			if share == nil {
				share = make([]string, len(entries))
			}
			share[i] = strings.TrimPrefix(wildcard, e.Key+"_")
		}
		st = append(st, step{next: next, byValue: byValue, wildcard: wildcard})
		if next != nil && next.limit != nil && i == len(entries)-1 {
			found = next.limit
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		cur = next
	}
	if found == nil {
		return Match{}
	}
	m := Match{Limit: found, Share: share, StatKey: found.Path}
	switch {
	case found.DetailedMetric:
		var b strings.Builder
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.Key)
			switch {
			case share != nil && share[i] != "":
				b.WriteByte('_')
				b.WriteString(share[i])
			case share != nil && e.Value == "":
			default: // without share_threshold: key_value, even for an empty value
				b.WriteByte('_')
				b.WriteString(e.Value)
			}
		}
		m.StatKey = b.String()
	case !plain:
		// value_to_metric: as envoyproxy/ratelimit, each level's key with
		// the request's value where the level asks for it.
		var b strings.Builder
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.Key)
			sp := st[i]
			v := ""
			switch {
			case sp.next == nil:
			case share != nil && share[i] != "":
				v = share[i]
			case sp.wildcard != "" && sp.next.valueToMetric:
				v = e.Value
			case sp.wildcard != "":
				v = strings.TrimPrefix(sp.wildcard, e.Key+"_")
			case sp.byValue, sp.next.valueToMetric:
				v = e.Value
			}
			if v != "" {
				b.WriteByte('_')
				b.WriteString(v)
			}
		}
		m.StatKey = b.String()
	}
	return m
}

// maxStack is how many entries Lookup tracks without allocating.
const maxStack = 8

// step is how Lookup matched one entry.
type step struct {
	next     *node
	byValue  bool
	wildcard string
}
