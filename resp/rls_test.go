package resp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rls/rules"
	"github.com/sluice-rl/sluice/rls/server"
)

// rlsServer starts a server with the rate limit service over the rules of
// dir, its clock frozen 10 minutes into 2030 (so a minute window ends in
// 60 s, an hour in 3000 s).
func rlsServer(t *testing.T, dir string) (*rawConn, *rls.Service, *Server) {
	t.Helper()
	svc, err := rls.New(rls.Config{Dir: dir, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, addr := serveEngine(t, Config{EnableDebug: true, RLS: svc}, engine.New(engine.Config{Stripes: 16}))
	c := rawDial(t, addr)
	c.do(t, "DEBUG", "CLOCK", "FREEZE", fmt.Sprint(epoch2030+600_000)).expect(t, "+OK")
	return c, svc, srv
}

// TestRLCheckMatchesGRPC: RL.CHECK and ShouldRateLimit decide the same
// request alike, through one service and one engine.
func TestRLCheckMatchesGRPC(t *testing.T) {
	c, svc, srv := rlsServer(t, "../rls/testdata/config")
	g, err := server.ListenGRPC("127.0.0.1:0", server.Config{Service: svc, Exec: srv.exec, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	c.do(t, "RL.CHECK", "api", "HITS", "4", "path", "/login").expect(t, "*2 [$2 OK *1 [*6 [$2 OK :1 :60 :5 $6 minute $5 login]]]")
	res, err := svc.Decide(context.Background(), srv.exec, &rls.Request{Domain: "api", Descriptors: []rls.Descriptor{{Entries: []rules.Entry{{Key: "path", Value: "/login"}}}}})
	if err != nil || res.Statuses[0].Remaining != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	c.do(t, "RL.CHECK", "api", "path", "/login").expect(t, "*2 [$10 OVER_LIMIT *1 [*6 [$10 OVER_LIMIT :0 :60 :5 $6 minute $5 login]]]")
}

func TestRLRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1, name: kk, algorithm: sliding}\n")
	c, svc, _ := rlsServer(t, dir)
	v1 := svc.Rules().Version()
	c.do(t, "RL.RULES").expect(t, "*12 [$7 version $16 "+v1+" $6 shadow :0 $5 loads :1 $11 load_errors :0 $10 last_error $0  $7 domains *1 [*3 [$1 a $6 a.yaml *1 [$33 a.k 1/hour sliding shadow name=kk]]]]")

	write("b.yaml", "domain: b\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1, quota_mode: true}}]\n")
	r := c.do(t, "RL.RULES", "RELOAD")
	if !strings.HasPrefix(string(r), "-ERR rules not reloaded, the previous rules stay in force: b.yaml: descriptor \"b.k\": field \"rate_limit.quota_mode\"") {
		t.Fatalf("bad reload: %s", r)
	}
	info := string(c.do(t, "INFO", "rls"))
	for _, w := range []string{"# Rls", "rls_rules_version:" + v1, "rls_config_load_errors:1", "rls_rules:1"} {
		if !strings.Contains(info, w) {
			t.Fatalf("INFO rls %q lacks %q", info, w)
		}
	}
	os.Remove(filepath.Join(dir, "b.yaml"))
	write("c.yaml", "domain: c\ndescriptors: [{key: k, rate_limit: {unit: day, requests_per_unit: 5}}]\n")
	r = c.do(t, "rl.rules", "reload")
	if !strings.Contains(string(r), "$5 loads :2 $11 load_errors :1") || !strings.Contains(string(r), "c.k 5/day fixed") || svc.Rules().Version() == v1 {
		t.Fatalf("good reload: %s", r)
	}
	c.do(t, "RL.CHECK", "c", "k", "v").expect(t, "*2 [$2 OK *1 [*6 [$2 OK :4 :85800 :5 $3 day $0 ]]]")
	info = string(c.do(t, "INFO", "rls"))
	if !strings.Contains(info, "rls_rule0:rule=c.k,total_hits=1,over_limit=0,near_limit=0,shadow_over_limit=0,within_limit=1") {
		t.Fatalf("INFO rls: %q", info)
	}
	c.do(t, "RL.RULES", "x").expect(t, "-ERR syntax error")
}

// TestRLSNotConfigured: INFO has no rls section without the service (RL.CHECK's
// and RL.RULES's refusal is in testdata/transcripts/rls.txt).
func TestRLSNotConfigured(t *testing.T) {
	c := rawDial(t, startServer(t, Config{}))
	if strings.Contains(string(c.do(t, "INFO")), "# Rls") {
		t.Fatal("INFO has an rls section without the service")
	}
}
