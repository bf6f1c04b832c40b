package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestGrafanaDashboard checks grafana/sluice.json against a running node:
// every metric its queries use exists in a real scrape (a durable node with
// two Raft groups, after allowed and denied decisions), with the label
// values the queries select, and is named in docs/operations.md; the
// panels have unique ids and use the dashboard's data source variable.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("grafana", "sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string
		Panels []struct {
			ID         int
			Type       string
			Title      string
			Datasource struct{ UID string }
			Targets    []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Type string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("sluice.json: %v", err)
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource")
	}
	if !hasDS || dash.UID == "" {
		t.Errorf("dashboard uid %q, datasource variable %v", dash.UID, hasDS)
	}
	var exprs []string
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, want := range []string{"sluice_decisions_total", "sluice_raft_commit_duration_seconds_bucket",
		"sluice_batch_hold_duration_seconds_bucket", `state="leader"`, "sluice_raft_applied_index"} {
		if !strings.Contains(strings.Join(exprs, "\n"), want) {
			t.Errorf("no query uses %s", want)
		}
	}

	families := scrapeNode(t)
	checkQueries(t, families, exprs)
	// The per-group panels rely on the group label of a node with several groups.
	if !hasLabel(families["sluice_raft_state"], "group", "1") {
		t.Error("sluice_raft_state has no group label on a node with --shards 2")
	}
}

// TestPrometheusRuleMetrics checks the chart's alerts the same way: every
// metric and label value their expressions select exists on a node.
func TestPrometheusRuleMetrics(t *testing.T) {
	helm := helmBinary(t)
	out, err := exec.Command(helm, "template", "demo", filepath.Join("helm", "sluice"), "--namespace", "rl",
		"--set", "metrics.prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderrOf(err))
	}
	var rule struct {
		Kind string
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	if err := yaml.Unmarshal(out, &rule); err != nil || rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) != 1 {
		t.Fatalf("PrometheusRule: %v\n%s", err, out)
	}
	var exprs []string
	for _, r := range rule.Spec.Groups[0].Rules {
		if r.Alert == "" || r.Expr == "" {
			t.Errorf("rule %+v", r)
		}
		exprs = append(exprs, r.Expr)
	}
	if len(exprs) < 8 {
		t.Errorf("%d alerts", len(exprs))
	}
	checkQueries(t, scrapeNode(t), exprs)
}

// targetLabels are the labels Prometheus adds to a scrape, not the node.
var targetLabels = map[string]bool{"job": true, "instance": true, "namespace": true, "pod": true, "service": true}

// checkQueries fails the test for each sluice_* metric in the PromQL
// expressions that the scrape lacks, for each label="value" they select
// that no series has, and for each metric docs/operations.md does not name.
func checkQueries(t *testing.T, families map[string]*dto.MetricFamily, exprs []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	selector := regexp.MustCompile(`(sluice_[a-z0-9_]+)(\{([^}]*)\})?`)
	matcher := regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	for _, expr := range exprs {
		for _, m := range selector.FindAllStringSubmatch(expr, -1) {
			name := m[1]
			mf := families[name]
			if mf == nil {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(name, suffix); ok && families[base] != nil && families[base].GetType() == dto.MetricType_HISTOGRAM {
						name, mf = base, families[base]
					}
				}
			}
			if mf == nil {
				t.Errorf("%s (in %s) is not in a node's /metrics", m[1], expr)
				continue
			}
			if !regexp.MustCompile(regexp.QuoteMeta(name) + `[^a-z0-9_]`).Match(doc) {
				t.Errorf("docs/operations.md does not name %s", name)
			}
			for _, lm := range matcher.FindAllStringSubmatch(m[3], -1) {
				if !targetLabels[lm[1]] && !hasLabel(mf, lm[1], lm[2]) {
					t.Errorf("%s has no series with %s=%q (in %s)", name, lm[1], lm[2], expr)
				}
			}
		}
	}
}

func hasLabel(mf *dto.MetricFamily, name, value string) bool {
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == name && lp.GetValue() == value {
				return true
			}
		}
	}
	return false
}

// scrapeNode starts a durable node with two Raft groups and metrics,
// makes allowed and denied decisions on keys of both groups, and returns
// its parsed /metrics.
func scrapeNode(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	// The Raft and forward ports too: their defaults (the RESP port + 1000
	// and + 2000) are not checked free and may fall in the ephemeral range.
	a := freeAddrs(t, 4)
	addr, metrics, raftAddr, fwdAddr := a[0], a[1], a[2], a[3]
	p, err := sluiceproc.Start("sluice", binary, []string{"--addr", addr, "--metrics-addr", metrics, "--shards", "2",
		"--raft-addr", raftAddr, "--forward-addr", fwdAddr,
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--log-level", "warn"}, sluiceproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metrics + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if code, _ := get("/readyz"); code != http.StatusOK {
			return fmt.Errorf("node not ready: /readyz %d", code)
		}
		return nil
	})
	c, err := respwire.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 16 { // keys in both groups; the second call on each is denied
		for range 2 {
			if v, err := c.Do(5*time.Second, "RL.TOKEN", fmt.Sprintf("dash:%d", i), "1", "1/m"); err != nil || v.Kind != respwire.Array {
				t.Fatalf("RL.TOKEN: %v %v", v, err)
			}
		}
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}
