package rules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadGood(t *testing.T) *Set {
	t.Helper()
	s, err := LoadDir("testdata/good")
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	return s
}

func kv(pairs ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func TestLookup(t *testing.T) {
	s := loadGood(t)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		path    string // "" for no rule
		rpu     uint32
		unit    Unit
		stat    string
		share   []string
	}{
		{"key alone", "api", kv("remote_address", "10.0.0.1"), "api.remote_address", 10, UnitHour, "api.remote_address", nil},
		{"key_value", "api", kv("path", "/login"), "api.path_/login", 5, UnitMinute, "api.path_/login", nil},
		{"no rule for other value", "api", kv("path", "/other"), "", 0, 0, "", nil},
		{"wildcard", "api", kv("path", "/api/v1/users"), "api.path_/api/*", 100, UnitDay, "api.path_/api/v1/users", nil},
		{"first wildcard in file order", "api", kv("path", "/abc"), "api.path_/a*", 7, UnitMinute, "api.path_/a*", nil},
		{"share_threshold", "api", kv("path", "/static/x.css"), "api.path_/static*", 50, UnitSecond, "api.path_/static*", []string{"/static*"}},
		{"value_to_metric", "api", kv("user", "alice"), "api.user", 20, UnitHour, "api.user_alice", nil},
		{"unlimited", "api", kv("internal", "yes"), "api.internal", 0, UnitUnknown, "api.internal", nil},
		{"nested by value", "api", kv("tenant", "t1", "plan", "gold"), "api.tenant.plan_gold", 1000, UnitWeek, "api.tenant.plan_gold", nil},
		{"nested by key", "api", kv("tenant", "t1", "plan", "free"), "api.tenant.plan", 100, UnitMonth, "api.tenant.plan", nil},
		{"intermediate level has no limit", "api", kv("tenant", "t1"), "", 0, 0, "", nil},
		{"more entries than the tree", "api", kv("remote_address", "a", "extra", "b"), "", 0, 0, "", nil},
		{"rule at both levels: parent", "api", kv("client", "mobile"), "api.client_mobile", 3, UnitMinute, "api.client_mobile", nil},
		{"rule at both levels: child", "api", kv("client", "mobile", "route", "r"), "api.client_mobile.route", 2, UnitMinute, "api.client_mobile.route", nil},
		{"unknown key", "api", kv("nope", "x"), "", 0, 0, "", nil},
		{"unknown domain", "nope", kv("remote_address", "x"), "", 0, 0, "", nil},
		{"second file", "web", kv("generic_key", "default"), "web.generic_key_default", 60, UnitMinute, "web.generic_key_default", nil},
		{"no entries", "api", nil, "", 0, 0, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := s.Lookup(tc.domain, tc.entries)
			if tc.path == "" {
				if m.Limit != nil {
					t.Fatalf("got rule %s, want none", m.Limit.Path)
				}
				return
			}
			if m.Limit == nil {
				t.Fatalf("got no rule, want %s", tc.path)
			}
			if m.Limit.Path != tc.path || m.Limit.RequestsPerUnit != tc.rpu || m.Limit.Unit != tc.unit {
				t.Fatalf("got %s %d/%s, want %s %d/%s", m.Limit.Path, m.Limit.RequestsPerUnit, m.Limit.Unit, tc.path, tc.rpu, tc.unit)
			}
			if m.StatKey != tc.stat {
				t.Fatalf("stat key %q, want %q", m.StatKey, tc.stat)
			}
			if strings.Join(m.Share, ",") != strings.Join(tc.share, ",") {
				t.Fatalf("share %q, want %q", m.Share, tc.share)
			}
		})
	}
}

func TestLoadFields(t *testing.T) {
	s := loadGood(t)
	if got := len(s.Domains()); got != 2 {
		t.Fatalf("%d domains, want 2 (README.txt is not a rules file)", got)
	}
	m := s.Lookup("api", kv("internal", "x"))
	if !m.Limit.Unlimited || strings.Join(m.Limit.Replaces, ",") != "login" {
		t.Fatalf("internal: %+v", m.Limit)
	}
	if m := s.Lookup("api", kv("shadowed", "x")); !m.Limit.ShadowMode {
		t.Fatal("shadow_mode not loaded")
	}
	if m := s.Lookup("api", kv("zero", "x")); m.Limit.RequestsPerUnit != 0 || m.Limit.Unit != UnitYear {
		t.Fatalf("zero: %+v", m.Limit)
	}
	if m := s.Lookup("api", kv("tenant", "a", "plan", "gold")); m.Limit.Algorithm != Token {
		t.Fatalf("algorithm %s, want token", m.Limit.Algorithm)
	}
	if m := s.Lookup("api", kv("remote_address", "a")); m.Limit.Algorithm != Fixed {
		t.Fatalf("default algorithm %s, want fixed", m.Limit.Algorithm)
	}
	if s.NumRules() != 15 {
		t.Fatalf("%d rules, want 15", s.NumRules())
	}
	if len(s.Version()) != 16 {
		t.Fatalf("version %q", s.Version())
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		file string
		want []string // substrings of the error
	}{
		{"quota.yaml", []string{"quota.yaml", `descriptor "q.a"`, `field "descriptors[0].quota_mode"`, "not supported"}},
		{"unknown.yaml", []string{"unknown.yaml", `descriptor "u.a"`, `rate_limit.burst`, "unknown field"}},
		{"unit.yaml", []string{"unit.yaml", `descriptor "u.a_b"`, `"rate_limit.unit"`, `invalid unit "fortnight"`}},
		{"negative.yaml", []string{"negative.yaml", `descriptor "n.a"`, `"rate_limit.requests_per_unit"`, "negative"}},
		{"dupkey.yaml", []string{"dupkey.yaml", `descriptor "d.a"`, "duplicate descriptor"}},
		{"unlimitedunit.yaml", []string{`descriptor "d.a"`, `"rate_limit.unit"`, "unlimited rule takes no unit"}},
		{"share.yaml", []string{`descriptor "d.a_b"`, `"share_threshold"`, "wildcard"}},
		{"algo.yaml", []string{`descriptor "d.a"`, `"rate_limit.algorithm"`, `invalid algorithm "gcra"`}},
		{"selfreplace.yaml", []string{`descriptor "d.a"`, `"rate_limit.replaces[0].name"`, "replace itself"}},
		{"emptydomain.yaml", []string{"emptydomain.yaml", `field "domain"`, "must not be empty"}},
		{"topunknown.yaml", []string{"topunknown.yaml", `field "descriptor"`, "unknown field"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata/bad", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(map[string][]byte{tc.file: b})
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("error %v (%T), want a *LoadError", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := LoadDir("testdata/bad"); err == nil {
		t.Fatal("LoadDir of the bad directory succeeded")
	}
}

func TestDuplicateDomain(t *testing.T) {
	f := []byte("domain: x\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	_, err := Parse(map[string][]byte{"a.yaml": f, "b.yaml": f})
	if err == nil || !strings.Contains(err.Error(), `duplicate domain "x" (also in a.yaml)`) || !strings.HasPrefix(err.Error(), "b.yaml") {
		t.Fatalf("error %v", err)
	}
}

func TestVersion(t *testing.T) {
	a := []byte("domain: x\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	b := []byte("# a comment\ndomain: x\ndescriptors:\n  - rate_limit: {requests_per_unit: 1, unit: SECOND}\n    key: a\n")
	c := []byte("domain: x\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 2}}]\n")
	sa, _ := Parse(map[string][]byte{"a.yaml": a})
	sb, _ := Parse(map[string][]byte{"other.yaml": b})
	sc, _ := Parse(map[string][]byte{"a.yaml": c})
	if sa.Version() != sb.Version() {
		t.Fatalf("the same rules written differently have versions %s and %s", sa.Version(), sb.Version())
	}
	if sa.Version() == sc.Version() {
		t.Fatal("a changed limit kept the version")
	}
}

func TestUnits(t *testing.T) {
	want := map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "month": 2592000, "year": 31536000}
	for name, sec := range want {
		u, ok := ParseUnit(strings.ToUpper(name))
		if !ok || u.Seconds() != sec || u.String() != name {
			t.Errorf("%s: %v %d %s", name, ok, u.Seconds(), u)
		}
	}
	if _, ok := ParseUnit("unknown"); ok {
		t.Error("unknown parsed")
	}
}
