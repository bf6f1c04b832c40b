package rls

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/rls/rules"
)

// ruleStats is one metric series: a rule (or, with detailed_metric or
// value_to_metric, a rule and the request's values).
type ruleStats struct {
	domain, key     string
	totalHits       atomic.Uint64
	overLimit       atomic.Uint64
	nearLimit       atomic.Uint64
	shadowOverLimit atomic.Uint64
	withinLimit     atomic.Uint64
}

// metrics holds the series, at most max of them: per rule they are bounded
// by the rules; a value-named series beyond the bound counts in its rule's
// own series. Series survive reloads (counters never go back).
type metrics struct {
	byKey sync.Map // string -> *ruleStats: lock-free reads on the request path
	mu    sync.Mutex
	n     int // series created, under mu
	max   int
}

func newMetrics(max int) *metrics {
	return &metrics{max: max}
}

// get returns the series of key (the rule's path when key is one of
// unbounded values and the bound is reached).
func (m *metrics) get(l *rules.Limit, key string) *ruleStats {
	if v, ok := m.byKey.Load(key); ok {
		return v.(*ruleStats)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.byKey.Load(key); ok {
		return v.(*ruleStats)
	}
	if m.n >= m.max && key != l.Path {
		key = l.Path
		if v, ok := m.byKey.Load(key); ok {
			return v.(*ruleStats)
		}
	}
	st := &ruleStats{domain: l.Domain, key: key}
	m.byKey.Store(key, st)
	m.n++
	return st
}

// RuleStats is one series' counters, for INFO rls and tests.
type RuleStats struct {
	Domain, Rule                                                  string
	TotalHits, OverLimit, NearLimit, ShadowOverLimit, WithinLimit uint64
}

// Stats returns every series, sorted by rule.
func (s *Service) Stats() []RuleStats {
	var out []RuleStats
	s.metrics.byKey.Range(func(_, v any) bool {
		st := v.(*ruleStats)
		out = append(out, RuleStats{
			Domain: st.domain, Rule: st.key,
			TotalHits: st.totalHits.Load(), OverLimit: st.overLimit.Load(), NearLimit: st.nearLimit.Load(),
			ShadowOverLimit: st.shadowOverLimit.Load(), WithinLimit: st.withinLimit.Load(),
		})
		return true
	})
	slices.SortFunc(out, func(a, b RuleStats) int {
		if a.Rule < b.Rule {
			return -1
		}
		if a.Rule > b.Rule {
			return 1
		}
		return 0
	})
	return out
}

var (
	descTotal  = prometheus.NewDesc("sluice_rls_total_hits_total", "Hits (descriptor costs) that met a rule of the Envoy rate limit service.", []string{"domain", "rule"}, nil)
	descOver   = prometheus.NewDesc("sluice_rls_over_limit_total", "Hits over their rule's limit (shadow rules included).", []string{"domain", "rule"}, nil)
	descNear   = prometheus.NewDesc("sluice_rls_near_limit_total", "Hits at or above 80% of their rule's limit.", []string{"domain", "rule"}, nil)
	descShadow = prometheus.NewDesc("sluice_rls_shadow_over_limit_total", "Hits a shadow rule (or --rls-shadow) would have denied.", []string{"domain", "rule"}, nil)
	descWithin = prometheus.NewDesc("sluice_rls_within_limit_total", "Hits within their rule's limit.", []string{"domain", "rule"}, nil)
	descLoads  = prometheus.NewDesc("sluice_rls_config_loads_total", "Successful loads of --rls-config (start-up and reloads).", nil, nil)
	descErrors = prometheus.NewDesc("sluice_rls_config_load_errors_total", "Failed reloads of --rls-config (the previous rules stayed in force).", nil, nil)
	descRules  = prometheus.NewDesc("sluice_rls_rules", "Rules in force, labelled with their version hash.", []string{"version"}, nil)
)

// Collector exports the service's metrics to Prometheus.
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTotal, descOver, descNear, descShadow, descWithin, descLoads, descErrors, descRules} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.s.Stats() {
		for _, v := range []struct {
			d *prometheus.Desc
			n uint64
		}{{descTotal, st.TotalHits}, {descOver, st.OverLimit}, {descNear, st.NearLimit}, {descShadow, st.ShadowOverLimit}, {descWithin, st.WithinLimit}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n), st.Domain, st.Rule)
		}
	}
	loads, errs, _ := c.s.LoadStats()
	ch <- prometheus.MustNewConstMetric(descLoads, prometheus.CounterValue, float64(loads))
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(errs))
	set := c.s.Rules()
	ch <- prometheus.MustNewConstMetric(descRules, prometheus.GaugeValue, float64(set.NumRules()), set.Version())
}
