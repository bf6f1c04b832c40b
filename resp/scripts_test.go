package resp

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/servetest"
	"github.com/sluice-rl/sluice/internal/slots"
)

// In memory, where connections apply concurrently, nothing interleaves
// with a script: a read-modify-write in Lua loses no increment of the
// INCRs other connections send meanwhile.
func TestScriptsAtomicInMemory(t *testing.T) {
	addr := startServer(t, Config{})
	const workers, rounds = 4, 200
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := dialRawReply(t, addr)
			for i := 0; i < rounds; i++ {
				if w%2 == 0 {
					c.do(t, "INCR", "counter")
					continue
				}
				// GET, then SET of the value plus one, with a loop between
				// to widen the window another command could fall into.
				// Every other script names the key only in ARGV: its stripe
				// is taken when reached (or the script rerun holding all).
				script, keys := "local v = tonumber(redis.call('GET', KEYS[1]) or '0') for i = 1, 200 do end redis.call('SET', KEYS[1], v + 1) return v + 1", "1"
				if i%2 == 1 {
					script, keys = strings.ReplaceAll(script, "KEYS[1]", "ARGV[1]"), "0"
				}
				if got := c.do(t, "EVAL", script, keys, "counter"); !strings.HasPrefix(got, ":") {
					t.Errorf("EVAL: %q", got)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	c := dialRawReply(t, addr)
	if got, want := c.do(t, "GET", "counter"), "$3\r\n"+strconv.Itoa(workers*rounds)+"\r\n"; got != want {
		t.Fatalf("counter %q, want %q: a script interleaved with other commands", got, want)
	}
}

// With several groups, a script's keys must share a group (CROSSSLOT),
// and a command inside it on a key of another group is refused with
// Redis's cluster text.
func TestScriptsShardRules(t *testing.T) {
	base := NewScriptRunner(ScriptConfig{Groups: 3})
	runner := base.ForGroup(2) // foo's group (slot 12182); bar is in group 0
	eng := engine.New(engine.Config{Stripes: 16, Scripts: runner})
	table, _ := slots.Even(3)
	d := &downGroup{fakeCluster: &fakeCluster{LocalExecutor: NewLocalExecutor(eng, nil)}, table: table, down: -1}
	d.set(threeGroups, "", true)
	srv := NewServer(Config{Cluster: true, Engine: eng, Scripts: runner}, d)
	c := dialRawReply(t, servetest.Start(t, srv))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EVAL", "return 1", "2", "foo", "bar"}, "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{[]string{"EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "foo"}, "+OK\r\n"},
		{[]string{"EVAL", "return redis.call('GET', 'bar')", "1", "foo"}, "-ERR Script attempted to access a non local key in a cluster node script: "},
		{[]string{"EVAL", "return redis.call('GET', '{foo}x')", "1", "foo"}, "$-1\r\n"},
		{[]string{"EVAL", "return 2", "0"}, ":2\r\n"},
	} {
		if got := c.do(t, tc.args...); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: %q, want %q...", tc.args, got, tc.want)
		}
	}
}

// INFO memory counts the cached scripts, and the metrics count each
// script's runs and errors by its SHA1 prefix.
func TestScriptsInfoAndMetrics(t *testing.T) {
	runner := NewScriptRunner(ScriptConfig{})
	eng := engine.New(engine.Config{Stripes: 16, Scripts: runner})
	srv, addr := serveEngine(t, Config{Scripts: runner}, eng)
	c := dialRawReply(t, addr)
	c.do(t, "SCRIPT", "LOAD", "return 1")
	c.do(t, "EVAL", "return 2", "0")
	c.do(t, "EVAL", "error('x')", "0")
	info := c.do(t, "INFO", "memory")
	for _, want := range []string{"number_of_cached_scripts:3\r\n", "used_memory_scripts:26\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO memory lacks %q:\n%s", want, info)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_script_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+"{"+m.GetLabel()[0].GetValue()+"}"] = m.GetCounter().GetValue()
		}
	}
	sha := engine.ScriptSHA([]byte("error('x')"))[:8]
	if got["sluice_script_calls_total{"+sha+"}"] != 1 || got["sluice_script_errors_total{"+sha+"}"] != 1 {
		t.Fatalf("script metrics %v", got)
	}
}

// TestScriptStatsLockFreeAndBounded: a run of a script seen before adds to
// its counters without allocating (no lock, no map write: the hot path),
// and the set of scripts with series stops growing at maxScriptSeries.
func TestScriptStatsLockFreeAndBounded(t *testing.T) {
	r := NewScriptRunner(ScriptConfig{})
	r.count("0123456789abcdef", true, false, time.Millisecond)
	if a := testing.AllocsPerRun(100, func() { r.count("0123456789abcdef", false, true, time.Millisecond) }); a != 0 {
		t.Errorf("a known script's run allocates %v times", a)
	}
	st := (*r.stats.by.Load())["01234567"]
	if st == nil || st.calls.Load() != 102 || st.native.Load() != 1 || st.errors.Load() != 101 || st.nanos.Load() != int64(102*time.Millisecond) {
		t.Fatalf("counters %+v", st)
	}
	for i := range 2 * maxScriptSeries {
		r.count(fmt.Sprintf("%08x", i+1<<20), false, false, 0)
	}
	if n := len(*r.stats.by.Load()); n != maxScriptSeries {
		t.Errorf("%d series, want at most %d", n, maxScriptSeries)
	}
}
